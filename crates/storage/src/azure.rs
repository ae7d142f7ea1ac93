//! Azure Blob Storage over its REST API, for real Azure and for Azurite.
//!
//! Hand-written on `reqwest` because no maintained Rust crate accepts storage connection
//! strings (Shared Key): `azure_storage_blob` 1.x signs in with Entra ID tokens or SAS URLs only
//! (its maintainers on azure-sdk-for-rust#2789), and the older `azure_storage_blobs` 0.21 is frozen ("no plans to update this unofficial crate"). Six
//! operations are all we need: create container, put blob, get blob, set metadata, list with
//! metadata, delete. Signing and the retry of transient failures are the endpoint's
//! (`rest.rs`), which the queue and table clients share; a failure that outlasts the retries
//! surfaces as [`StoreError::Unavailable`].

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use quick_xml::events::Event;
use reqwest::{Method, StatusCode};

use super::connection::StorageConnection;
use super::rest::{Dialect, RestRequest, ServiceEndpoint, rejection};
use super::{
    Blob, BlobProperties, BlobStore, Condition, ETag, Metadata, StoreError, WriteOutcome,
    validate_blob_name, validate_container_name, validate_metadata,
};

/// What a path segment may keep unencoded (Python's `quote(safe='~/')`, which Azure and Azurite
/// both sign and route correctly).
pub(crate) const PATH_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

pub struct AzureBlobStore {
    conn: StorageConnection,
    endpoint: ServiceEndpoint,
}

struct Request<'a> {
    method: Method,
    container: &'a str,
    name: Option<&'a str>,
    query: Vec<(&'static str, String)>,
    headers: Vec<(String, String)>,
    body: Bytes,
}

impl AzureBlobStore {
    pub fn new(conn: StorageConnection) -> Result<Self, StoreError> {
        let endpoint = ServiceEndpoint::new(&conn.blob_endpoint, &conn.credential, Dialect::Full)?;
        Ok(AzureBlobStore { conn, endpoint })
    }

    fn path_of(&self, container: &str, name: Option<&str>) -> String {
        let mut path = format!("/{container}");
        if let Some(name) = name {
            path.push('/');
            path.extend(utf8_percent_encode(name, PATH_KEEP));
        }
        path
    }

    /// Sends one request, retrying transient failures; returns the response of the last attempt.
    async fn send(&self, req: Request<'_>) -> Result<reqwest::Response, StoreError> {
        let path = self.path_of(req.container, req.name);
        self.endpoint
            .send(&RestRequest {
                method: req.method,
                path: &path,
                query: req.query,
                headers: req.headers,
                body: req.body,
            })
            .await
    }

    async fn error_from(
        &self,
        resp: reqwest::Response,
        container: &str,
        name: Option<&str>,
    ) -> StoreError {
        let refused = rejection(resp).await;
        let name = name.unwrap_or("");
        if refused.status == StatusCode::CONFLICT && refused.code == "BlobAlreadyExists" {
            return StoreError::AlreadyExists {
                container: container.to_string(),
                name: name.to_string(),
            };
        }
        refused.into_error(self.endpoint.origin(), container, name)
    }

    fn condition_headers(condition: &Condition) -> Vec<(String, String)> {
        match condition {
            Condition::Always => vec![],
            Condition::IfNotExists => vec![("If-None-Match".into(), "*".into())],
            Condition::IfMatch(etag) => vec![("If-Match".into(), format!("\"{etag}\""))],
        }
    }

    fn outcome(resp: &reqwest::Response) -> Result<WriteOutcome, StoreError> {
        let etag = header_str(resp, "etag")
            .ok_or_else(|| StoreError::Unavailable("storage answered without an ETag".into()))?;
        Ok(WriteOutcome {
            etag: ETag::new(etag),
            last_modified: header_str(resp, "last-modified")
                .and_then(|v| DateTime::parse_from_rfc2822(&v).ok())
                .map(|d| d.with_timezone(&Utc))
                .unwrap_or_else(Utc::now),
        })
    }

    async fn put_once(
        &self,
        container: &str,
        name: &str,
        data: &Bytes,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        let mut headers = Self::condition_headers(condition);
        headers.push(("x-ms-blob-type".into(), "BlockBlob".into()));
        headers.extend(
            metadata
                .iter()
                .map(|(k, v)| (format!("x-ms-meta-{k}"), v.clone())),
        );
        let resp = self
            .send(Request {
                method: Method::PUT,
                container,
                name: Some(name),
                query: vec![],
                headers,
                body: data.clone(),
            })
            .await?;
        if resp.status().is_success() {
            Self::outcome(&resp)
        } else {
            Err(self.error_from(resp, container, Some(name)).await)
        }
    }
}

fn header_str(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The text of the first `<tag>` element in an XML error body.
pub(crate) fn xml_element(xml: &str, tag: &str) -> Option<String> {
    let start = xml.find(&format!("<{tag}>"))? + tag.len() + 2;
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(xml[start..end].lines().next().unwrap_or("").to_string())
}

#[derive(Default)]
struct ListedBlob {
    name: String,
    etag: String,
    last_modified: String,
    size: u64,
    metadata: Metadata,
}

/// Parses one page of a List Blobs answer: the blobs and the continuation marker.
fn parse_list_page(xml: &str) -> Result<(Vec<ListedBlob>, Option<String>), String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut path: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut current: Option<ListedBlob> = None;
    let mut blobs = Vec::new();
    let mut marker = None;
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(e) => {
                let tag = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
                if tag == "Blob" {
                    current = Some(ListedBlob::default());
                }
                path.push(tag);
                text.clear();
            }
            Event::Empty(e) => {
                let tag = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
                if let (Some(blob), Some("Metadata")) =
                    (current.as_mut(), path.last().map(String::as_str))
                {
                    blob.metadata
                        .insert(tag.to_ascii_lowercase(), String::new());
                }
            }
            Event::Text(t) => text.push_str(&t.decode().map_err(|e| e.to_string())?),
            Event::GeneralRef(r) => {
                if let Some(c) = r.resolve_char_ref().map_err(|e| e.to_string())? {
                    text.push(c);
                } else {
                    let entity = r.decode().map_err(|e| e.to_string())?;
                    let resolved = quick_xml::escape::resolve_predefined_entity(&entity)
                        .ok_or_else(|| format!("unknown XML entity &{entity};"))?;
                    text.push_str(resolved);
                }
            }
            Event::End(_) => {
                let tag = path.pop().unwrap_or_default();
                let parent = path.last().map(String::as_str);
                let value = std::mem::take(&mut text);
                match (tag.as_str(), parent, current.as_mut()) {
                    ("Blob", _, _) => blobs.extend(current.take()),
                    ("Name", Some("Blob"), Some(b)) => b.name = value,
                    ("Etag", Some("Properties"), Some(b)) => b.etag = value,
                    ("Last-Modified", Some("Properties"), Some(b)) => b.last_modified = value,
                    ("Content-Length", Some("Properties"), Some(b)) => {
                        b.size = value.parse().unwrap_or(0)
                    }
                    (key, Some("Metadata"), Some(b)) => {
                        b.metadata.insert(key.to_ascii_lowercase(), value);
                    }
                    ("NextMarker", _, None) if !value.is_empty() => marker = Some(value),
                    _ => {}
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok((blobs, marker))
}

#[async_trait]
impl BlobStore for AzureBlobStore {
    fn describe(&self) -> String {
        format!("{:?}", self.conn)
    }

    async fn ensure_container(&self, container: &str) -> Result<(), StoreError> {
        validate_container_name(container)?;
        let resp = self
            .send(Request {
                method: Method::PUT,
                container,
                name: None,
                query: vec![("restype", "container".into())],
                headers: vec![],
                body: Bytes::new(),
            })
            .await?;
        if resp.status().is_success() || resp.status() == StatusCode::CONFLICT {
            Ok(())
        } else {
            Err(self.error_from(resp, container, None).await)
        }
    }

    async fn get(&self, container: &str, name: &str) -> Result<Option<Blob>, StoreError> {
        validate_blob_name(name)?;
        let resp = self
            .send(Request {
                method: Method::GET,
                container,
                name: Some(name),
                query: vec![],
                headers: vec![],
                body: Bytes::new(),
            })
            .await?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(self.error_from(resp, container, Some(name)).await);
        }
        let outcome = Self::outcome(&resp)?;
        let metadata: Metadata = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| {
                let key = k.as_str().strip_prefix("x-ms-meta-")?;
                Some((key.to_ascii_lowercase(), v.to_str().ok()?.to_string()))
            })
            .collect();
        let data = resp.bytes().await.map_err(|e| {
            StoreError::Unavailable(format!(
                "reading blob '{container}/{name}': {}",
                e.without_url()
            ))
        })?;
        Ok(Some(Blob {
            properties: BlobProperties {
                name: name.to_string(),
                etag: outcome.etag,
                last_modified: outcome.last_modified,
                metadata,
                size: data.len() as u64,
            },
            data,
        }))
    }

    async fn put(
        &self,
        container: &str,
        name: &str,
        data: Bytes,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        validate_blob_name(name)?;
        validate_metadata(metadata)?;
        match self
            .put_once(container, name, &data, metadata, condition)
            .await
        {
            // The version we saw is gone: for the caller that is a lost race like any other.
            Err(StoreError::NotFound { .. }) if matches!(condition, Condition::IfMatch(_)) => {
                Err(StoreError::ConditionNotMet {
                    container: container.to_string(),
                    name: name.to_string(),
                })
            }
            // The container was deleted under us (or never made): make it and write again.
            Err(StoreError::NotFound { .. }) => {
                self.ensure_container(container).await?;
                self.put_once(container, name, &data, metadata, condition)
                    .await
            }
            other => other,
        }
    }

    async fn set_metadata(
        &self,
        container: &str,
        name: &str,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        validate_blob_name(name)?;
        validate_metadata(metadata)?;
        let mut headers = Self::condition_headers(condition);
        headers.extend(
            metadata
                .iter()
                .map(|(k, v)| (format!("x-ms-meta-{k}"), v.clone())),
        );
        let resp = self
            .send(Request {
                method: Method::PUT,
                container,
                name: Some(name),
                query: vec![("comp", "metadata".into())],
                headers,
                body: Bytes::new(),
            })
            .await?;
        if resp.status().is_success() {
            Self::outcome(&resp)
        } else {
            Err(self.error_from(resp, container, Some(name)).await)
        }
    }

    async fn list(&self, container: &str, prefix: &str) -> Result<Vec<BlobProperties>, StoreError> {
        validate_container_name(container)?;
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut query = vec![
                ("restype", "container".to_string()),
                ("comp", "list".to_string()),
                ("include", "metadata".to_string()),
            ];
            if !prefix.is_empty() {
                query.push(("prefix", prefix.to_string()));
            }
            if let Some(m) = &marker {
                query.push(("marker", m.clone()));
            }
            let resp = self
                .send(Request {
                    method: Method::GET,
                    container,
                    name: None,
                    query,
                    headers: vec![],
                    body: Bytes::new(),
                })
                .await?;
            if resp.status() == StatusCode::NOT_FOUND {
                return Ok(out);
            }
            if !resp.status().is_success() {
                return Err(self.error_from(resp, container, None).await);
            }
            let xml = resp.text().await.map_err(|e| {
                StoreError::Unavailable(format!("reading a listing: {}", e.without_url()))
            })?;
            let (blobs, next) = parse_list_page(&xml).map_err(|reason| StoreError::Corrupt {
                container: container.to_string(),
                name: format!("(listing of '{prefix}')"),
                reason,
            })?;
            for b in blobs {
                out.push(BlobProperties {
                    last_modified: DateTime::parse_from_rfc2822(&b.last_modified)
                        .map(|d| d.with_timezone(&Utc))
                        .unwrap_or_else(|_| Utc::now()),
                    name: b.name,
                    etag: ETag::new(b.etag),
                    metadata: b.metadata,
                    size: b.size,
                });
            }
            match next {
                Some(m) => marker = Some(m),
                None => return Ok(out),
            }
        }
    }

    async fn delete(&self, container: &str, name: &str) -> Result<(), StoreError> {
        validate_blob_name(name)?;
        let resp = self
            .send(Request {
                method: Method::DELETE,
                container,
                name: Some(name),
                query: vec![],
                headers: vec![],
                body: Bytes::new(),
            })
            .await?;
        if resp.status().is_success() || resp.status() == StatusCode::NOT_FOUND {
            Ok(())
        } else {
            Err(self.error_from(resp, container, Some(name)).await)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_pages_parse_names_metadata_and_markers() {
        let xml = r#"<?xml version="1.0" encoding="utf-8"?>
<EnumerationResults ServiceEndpoint="http://127.0.0.1:10000/devstoreaccount1" ContainerName="c">
<Prefix>ns/</Prefix><Blobs>
<Blob><Name>ns/hub/$default/ownership/0</Name><Properties><Last-Modified>Sun, 22 Nov 2026 13:00:00 GMT</Last-Modified><Etag>0x8DA6E28262505DD</Etag><Content-Length>0</Content-Length></Properties><Metadata><ownerid>a&amp;b</ownerid><empty/></Metadata></Blob>
<Blob><Name>ns/hub/$default/ownership/1</Name><Properties><Etag>"0x1"</Etag></Properties><Metadata/></Blob>
</Blobs><NextMarker>abc</NextMarker></EnumerationResults>"#;
        let (blobs, marker) = parse_list_page(xml).unwrap();
        assert_eq!(blobs.len(), 2);
        assert_eq!(blobs[0].name, "ns/hub/$default/ownership/0");
        assert_eq!(blobs[0].metadata["ownerid"], "a&b");
        assert_eq!(blobs[0].metadata["empty"], "");
        assert_eq!(blobs[0].etag, "0x8DA6E28262505DD");
        assert_eq!(blobs[1].metadata.len(), 0);
        assert_eq!(marker.as_deref(), Some("abc"));
    }

    #[test]
    fn blob_names_are_encoded_like_the_python_sdk() {
        let store = AzureBlobStore::new(StorageConnection::development()).unwrap();
        assert_eq!(
            store
                .endpoint
                .full_path(&store.path_of("c", Some("ns/hub/$default/checkpoint/0"))),
            "/devstoreaccount1/c/ns/hub/%24default/checkpoint/0"
        );
    }
}
