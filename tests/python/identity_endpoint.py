"""A local stand-in for the two places Entra ID tokens come from, for tests against Azurite's
OAuth mode (which checks a token's issuer, audience and lifetime, not its signature):

  GET  /msi/token?resource=…&api-version=2019-08-01   App Service / Functions managed identity
       (header X-IDENTITY-HEADER must equal the header given here)
  POST /{tenant}/oauth2/v2.0/token                    client-credentials grant
       (client_id and client_secret must equal those given here)

Usage: identity_endpoint.py <port> <identity header> <tenant> <client id> <client secret>
Each token is a JWT for the audience asked for (resource, or scope without /.default), valid
for 1 hour. Every request is appended as a JSON line to stdout.
"""

import base64
import json
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, HEADER, TENANT, CLIENT_ID, SECRET = sys.argv[1:6]


def b64(data):
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def token(audience):
    now = int(time.time())
    claims = {"aud": audience.rstrip("/"), "iss": f"https://sts.windows.net/{TENANT}/", "iat": now - 60,
              "nbf": now - 60, "exp": now + 3600, "oid": "00000000-0000-0000-0000-000000000001", "tid": TENANT}
    return b64({"alg": "RS256", "typ": "JWT"}) + "." + b64(claims) + ".c2lnbmF0dXJl", now + 3600


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
        print(json.dumps({"kind": "managed identity", "path": url.path, "query": query}), flush=True)
        if url.path != "/msi/token" or query.get("api-version") != "2019-08-01":
            return self.answer(404, {"error": "not_found", "error_description": "no such endpoint"})
        if self.headers.get("X-IDENTITY-HEADER") != HEADER:
            return self.answer(401, {"error": "unauthorized", "error_description": "X-IDENTITY-HEADER is wrong"})
        access, expires = token(query.get("resource", ""))
        self.answer(200, {"access_token": access, "expires_on": str(expires),
                          "resource": query.get("resource"), "token_type": "Bearer"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
        print(json.dumps({"kind": "client secret", "path": self.path, "scope": form.get("scope")}), flush=True)
        if self.path != f"/{TENANT}/oauth2/v2.0/token" or form.get("grant_type") != "client_credentials":
            return self.answer(400, {"error": "invalid_request", "error_description": "not a client-credentials grant"})
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != SECRET:
            return self.answer(401, {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."})
        access, _ = token(form.get("scope", "").removesuffix(".default"))
        self.answer(200, {"access_token": access, "expires_in": 3599, "token_type": "Bearer"})


ThreadingHTTPServer(("127.0.0.1", int(PORT)), Handler).serve_forever()
