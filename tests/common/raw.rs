//! Raw TCP: write exact bytes, read the raw response, see whether the
//! connection closes. Every read has a deadline.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A parsed HTTP/1.x response.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    /// The status line.
    pub status_line: String,
    /// Lowercased names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {self:?} {:?}", self.text()))
    }
}

/// A raw connection with a read buffer.
pub struct RawConn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

/// Connects (3 s deadline).
pub async fn connect(addr: SocketAddr) -> RawConn {
    try_connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"))
}

/// Connects (3 s deadline), reporting errors.
pub async fn try_connect(addr: SocketAddr) -> Result<RawConn, String> {
    let stream = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    stream.set_nodelay(true).ok();
    Ok(RawConn {
        stream,
        buf: Vec::new(),
    })
}

/// Whether a TCP connection to `addr` is refused right now.
pub async fn refuses(addr: SocketAddr) -> bool {
    match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await {
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        _ => false,
    }
}

/// What happened when reading until close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Closed {
    /// The peer closed (EOF or reset) after this long.
    After(Duration),
    /// Still open when the deadline passed.
    StillOpen,
}

impl RawConn {
    /// Writes all bytes (an error is returned, e.g. if the peer reset).
    pub async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        tokio::time::timeout(Duration::from_secs(5), async {
            self.stream.write_all(bytes).await?;
            self.stream.flush().await
        })
        .await
        .unwrap_or_else(|_| Err(std::io::Error::other("write timed out")))
    }

    /// Reads more bytes into the buffer; `Ok(0)` at EOF.
    async fn fill(&mut self, deadline: Instant) -> Result<usize, String> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("timed out".into());
        }
        let mut chunk = [0u8; 16 * 1024];
        match tokio::time::timeout(left, self.stream.read(&mut chunk)).await {
            Err(_) => Err("timed out".into()),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(0),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(n)
            }
        }
    }

    /// Reads exactly one response, using its framing (Content-Length,
    /// chunked, or until close). `Err` if the connection closed before a full
    /// head arrived, or on timeout.
    pub async fn read_response(&mut self, timeout: Duration) -> Result<RawResponse, String> {
        let deadline = Instant::now() + timeout;
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            if self.fill(deadline).await? == 0 {
                return Err(format!(
                    "connection closed before a response head (got {:?})",
                    String::from_utf8_lossy(&self.buf)
                ));
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        self.buf.drain(..head_end);
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or("").to_string();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line {status_line:?}"))?;
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .filter_map(|l| {
                l.split_once(':')
                    .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            })
            .collect();
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if (100..200).contains(&status) || status == 204 || status == 304 {
            // no body
        } else if get("transfer-encoding")
            .map(|v| v.to_ascii_lowercase().contains("chunked"))
            .unwrap_or(false)
        {
            loop {
                let line_end = loop {
                    if let Some(i) = find(&self.buf, b"\r\n") {
                        break i;
                    }
                    if self.fill(deadline).await? == 0 {
                        return Err("closed inside a chunked body".into());
                    }
                };
                let size_line = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
                let size =
                    usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                        .map_err(|_| format!("bad chunk size {size_line:?}"))?;
                self.buf.drain(..line_end + 2);
                if size == 0 {
                    // trailers until an empty line
                    loop {
                        let e = loop {
                            if let Some(i) = find(&self.buf, b"\r\n") {
                                break i;
                            }
                            if self.fill(deadline).await? == 0 {
                                return Err("closed inside trailers".into());
                            }
                        };
                        self.buf.drain(..e + 2);
                        if e == 0 {
                            break;
                        }
                    }
                    break;
                }
                while self.buf.len() < size + 2 {
                    if self.fill(deadline).await? == 0 {
                        return Err("closed inside a chunk".into());
                    }
                }
                body.extend_from_slice(&self.buf[..size]);
                self.buf.drain(..size + 2);
            }
        } else if let Some(cl) = get("content-length") {
            let n: usize = cl
                .parse()
                .map_err(|_| format!("bad content-length {cl:?}"))?;
            while self.buf.len() < n {
                if self.fill(deadline).await? == 0 {
                    return Err("closed inside a body".into());
                }
            }
            body.extend(self.buf.drain(..n));
        } else {
            while self.fill(deadline).await? > 0 {}
            body.append(&mut self.buf);
        }
        Ok(RawResponse {
            status,
            status_line,
            headers,
            body,
        })
    }

    /// Waits until the peer closes the connection (EOF or reset), discarding
    /// anything it sends, for at most `timeout`.
    pub async fn wait_closed(&mut self, timeout: Duration) -> Closed {
        let start = Instant::now();
        let deadline = start + timeout;
        loop {
            match self.fill(deadline).await {
                Ok(0) => return Closed::After(start.elapsed()),
                Ok(_) => continue,
                Err(e) if e == "timed out" => return Closed::StillOpen,
                Err(_) => return Closed::After(start.elapsed()),
            }
        }
    }

    /// Whether nothing at all arrives within `wait` (the connection stays
    /// open and silent).
    pub async fn silent_for(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        matches!(self.fill(deadline).await, Err(e) if e == "timed out")
    }
}

/// What a one-shot raw exchange produced.
#[derive(Debug)]
pub struct Exchange {
    /// The response, if a full one arrived.
    pub response: Option<RawResponse>,
    /// Why there is no response (if none).
    pub error: Option<String>,
    /// Whether the server closed the connection within the deadline after the
    /// response.
    pub closed: bool,
}

/// Connects, writes `bytes`, reads one response (5 s) and then waits up to
/// 3 s for the server to close the connection.
pub async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Exchange {
    let mut c = connect(addr).await;
    // The server may answer and close before we finish writing; that is fine.
    let _ = c.write(bytes).await;
    let (response, error) = match c.read_response(Duration::from_secs(5)).await {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e)),
    };
    let closed = match &error {
        Some(e) if e.starts_with("connection closed") => true,
        Some(_) => matches!(
            c.wait_closed(Duration::from_secs(3)).await,
            Closed::After(_)
        ),
        None => matches!(
            c.wait_closed(Duration::from_secs(3)).await,
            Closed::After(_)
        ),
    };
    Exchange {
        response,
        error,
        closed,
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `GET {target} HTTP/1.1` with `Host: test.local` and `Connection: close` on a
/// new connection, exactly as written; returns the response.
pub async fn get(addr: SocketAddr, target: &str) -> RawResponse {
    request(
        addr,
        format!("GET {target} HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
}

/// Writes `bytes` on a new connection and reads one response (5 s).
pub async fn request(addr: SocketAddr, bytes: &[u8]) -> RawResponse {
    let mut c = connect(addr).await;
    let _ = c.write(bytes).await;
    c.read_response(Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no response to {:?}: {e}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            )
        })
}

/// Asserts the gateway's JSON error shape on a raw response.
pub fn assert_error(r: &RawResponse, status: u16, code: &str) {
    assert_eq!(
        r.status,
        status,
        "expected {status} {code}, got {:?} {:?} body {:?}",
        r.status_line,
        r.headers,
        r.text()
    );
    let v = r.json();
    assert_eq!(v["error"], code, "error code in body {}", r.text());
    let rid = r
        .header("x-request-id")
        .unwrap_or_else(|| panic!("no x-request-id on {} response", r.status));
    assert!(!rid.is_empty(), "empty x-request-id");
    assert_eq!(
        v["request_id"], rid,
        "request_id in body must equal x-request-id"
    );
}
