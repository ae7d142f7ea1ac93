"""A local stand-in for the places Entra ID tokens come from, for tests of hubhost's sign-in
(through the Rust azure_identity crate) against Azurite's OAuth mode and `hubhost hub`:

  GET  /msi/token?resource=…&api-version=2019-08-01   App Service / Functions managed identity
       (header X-IDENTITY-HEADER must equal --header)
  GET  /metadata/identity/oauth2/token?resource=…     the VM metadata endpoint (IMDS)
       (header Metadata: true); run it on 169.254.169.254:80 in a network namespace
  POST /{tenant}/oauth2/v2.0/token                    client-credentials grant
       (client_id and client_secret must equal --client-id and --secret; needs --tls, since
       azure_identity only talks to an https authority)

A managed identity request naming a client_id other than --managed-client-id (when given) is
refused as the platform refuses an identity not assigned to the resource. Each token is a JWT
for the audience asked for (resource, or scope without /.default), valid for 1 hour, issued by
--issuer; signed with RS256 by --key (a PEM private key, kid "test-key"), else carrying a dummy
signature (Azurite checks issuer, audience and lifetime, not signatures). Every request is
appended as a JSON line to stdout.
"""

import argparse
import base64
import json
import ssl
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--bind", default="127.0.0.1")
parser.add_argument("--header", default="")
parser.add_argument("--tenant", default="tenant-1")
parser.add_argument("--client-id", default="client-1")
parser.add_argument("--secret", default="")
parser.add_argument("--managed-client-id", default=None)
parser.add_argument("--issuer", default=None)
parser.add_argument("--key", default=None)
parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), default=None)
ARGS = parser.parse_args()
ISSUER = ARGS.issuer or f"https://sts.windows.net/{ARGS.tenant}/"

SIGNER = None
if ARGS.key:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    with open(ARGS.key, "rb") as f:
        PRIVATE = serialization.load_pem_private_key(f.read(), password=None)
    SIGNER = lambda data: PRIVATE.sign(data, padding.PKCS1v15(), hashes.SHA256())


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(audience):
    now = int(time.time())
    claims = {"aud": audience, "iss": ISSUER, "iat": now - 60, "nbf": now - 60, "exp": now + 3600,
              "oid": "00000000-0000-0000-0000-000000000001", "tid": ARGS.tenant}
    header = {"alg": "RS256", "typ": "JWT", "kid": "test-key"}
    signed = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    signature = SIGNER(signed.encode()) if SIGNER else b"signature"
    return signed + "." + b64(signature), now + 3600


class Handler(BaseHTTPRequestHandler):
    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/msi/token":
            kind = "managed identity"
            allowed = self.headers.get("X-IDENTITY-HEADER") == ARGS.header
            refusal = "X-IDENTITY-HEADER is wrong"
        elif url.path == "/metadata/identity/oauth2/token":
            kind = "imds"
            allowed = self.headers.get("Metadata") == "true"
            refusal = "the Metadata header is missing"
        else:
            print(json.dumps({"kind": "unknown", "path": url.path, "query": query}), flush=True)
            return self.answer(404, {"error": "not_found", "error_description": "no such endpoint"})
        print(json.dumps({"kind": kind, "path": url.path, "query": query}), flush=True)
        if not allowed:
            return self.answer(401, {"error": "unauthorized", "error_description": refusal})
        wanted = query.get("client_id")
        if wanted is not None and wanted != ARGS.managed_client_id:
            return self.answer(400, {"error": "invalid_request",
                                     "error_description": f"Identity not found: {wanted}"})
        access, expires = token(query.get("resource", ""))
        self.answer(200, {"access_token": access, "expires_on": str(expires), "expires_in": "3599",
                          "resource": query.get("resource"), "token_type": "Bearer"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
        print(json.dumps({"kind": "client secret", "path": self.path, "scope": form.get("scope"),
                          "client_id": form.get("client_id")}), flush=True)
        if self.path != f"/{ARGS.tenant}/oauth2/v2.0/token" or form.get("grant_type") != "client_credentials":
            return self.answer(400, {"error": "invalid_request", "error_description": "not a client-credentials grant"})
        if form.get("client_id") != ARGS.client_id or form.get("client_secret") != ARGS.secret:
            return self.answer(401, {"error": "invalid_client", "error_codes": [7000215],
                                     "error_description": "AADSTS7000215: Invalid client secret provided."})
        access, _ = token(form.get("scope", "").removesuffix("/.default"))
        self.answer(200, {"access_token": access, "expires_in": 3599, "token_type": "Bearer"})


server = ThreadingHTTPServer((ARGS.bind, ARGS.port), Handler)
if ARGS.tls:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*ARGS.tls)
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
