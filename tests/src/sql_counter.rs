//! A loopback proxy in front of the test Postgres server that counts what a client sends (the
//! statements it executes and the round trips it makes) and the bytes the server answers
//! with. A catalog connected through it shows
//! what one of its calls costs the database, as [`CountingStore`](crate::CountingStore) does
//! for object storage.
//!
//! It reads the frontend half of the wire protocol only far enough to split it into messages:
//! the untyped start-up packets first (SSL and GSS encryption requests, then the startup
//! message), then typed messages. The connection must stay unencrypted, so the proxied URL
//! carries `sslmode=disable`. What the server sends back is copied through untouched, its
//! bytes counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the clients of a [`SqlCounter`] have sent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SqlCounts {
    /// Statements executed: extended-protocol `Execute` and simple `Query` messages.
    pub statements: u64,
    /// Requests the client waits on an answer for: `Sync` and simple `Query` messages
    /// (a pool's liveness ping is a bare `Sync`).
    pub round_trips: u64,
    /// Bytes the server sent back: rows, completions, the protocol's framing.
    pub bytes_received: u64,
}

impl SqlCounts {
    /// What was sent between `earlier` and `self`.
    pub fn since(&self, earlier: &SqlCounts) -> SqlCounts {
        SqlCounts {
            statements: self.statements - earlier.statements,
            round_trips: self.round_trips - earlier.round_trips,
            bytes_received: self.bytes_received - earlier.bytes_received,
        }
    }
}

impl std::ops::AddAssign for SqlCounts {
    fn add_assign(&mut self, other: Self) {
        self.statements += other.statements;
        self.round_trips += other.round_trips;
        self.bytes_received += other.bytes_received;
    }
}

#[derive(Debug, Default)]
struct Counters {
    statements: AtomicU64,
    round_trips: AtomicU64,
    bytes_received: AtomicU64,
}

/// The proxy: accepts on a loopback port until dropped, forwarding each connection to the
/// server.
#[derive(Debug)]
pub struct SqlCounter {
    url: String,
    counters: Arc<Counters>,
    accept: tokio::task::JoinHandle<()>,
}

impl SqlCounter {
    /// Starts a proxy to the server of `url` (`postgres://user@host:port/database`).
    pub async fn start(url: &str) -> Self {
        let mut parsed = url::Url::parse(url).expect("a postgres url");
        let upstream = format!(
            "{}:{}",
            parsed.host_str().expect("the postgres url names a host"),
            parsed.port().unwrap_or(5432)
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a port");
        let port = listener.local_addr().expect("bound").port();
        parsed.set_host(Some("127.0.0.1")).expect("a host");
        parsed.set_port(Some(port)).expect("a port");
        parsed.query_pairs_mut().append_pair("sslmode", "disable");
        let counters = Arc::new(Counters::default());
        let accept = {
            let counters = counters.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let (counters, upstream) = (counters.clone(), upstream.clone());
                    tokio::spawn(async move {
                        if let Ok(server) = TcpStream::connect(&upstream).await {
                            let _ = relay(client, server, &counters).await;
                        }
                    });
                }
            })
        };
        Self {
            url: parsed.into(),
            counters,
            accept,
        }
    }

    /// The URL that reaches the server through the proxy.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What the proxy's clients have sent so far.
    pub fn counts(&self) -> SqlCounts {
        SqlCounts {
            statements: self.counters.statements.load(Ordering::SeqCst),
            round_trips: self.counters.round_trips.load(Ordering::SeqCst),
            bytes_received: self.counters.bytes_received.load(Ordering::SeqCst),
        }
    }
}

impl Drop for SqlCounter {
    fn drop(&mut self) {
        // Open connections end when their pool closes them; only new ones are refused.
        self.accept.abort();
    }
}

/// Copies one connection both ways, counting the client's messages and the server's bytes.
async fn relay(client: TcpStream, server: TcpStream, counters: &Counters) -> std::io::Result<()> {
    // Without it, Nagle's algorithm holds back each short message for the previous one's
    // (delayed) acknowledgement: tens of milliseconds a statement.
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let answers = async {
        let mut buffer = vec![0; 64 * 1024];
        loop {
            let read = server_read.read(&mut buffer).await?;
            if read == 0 {
                break;
            }
            // Counted before it is forwarded, so that a client holding its answer finds it
            // counted.
            counters
                .bytes_received
                .fetch_add(read as u64, Ordering::SeqCst);
            client_write.write_all(&buffer[..read]).await?;
        }
        client_write.shutdown().await
    };
    let requests = async {
        // Untyped packets until the startup message: a length, then a code or a version.
        const SSL_REQUEST: [u8; 4] = 80_877_103u32.to_be_bytes();
        const GSS_REQUEST: [u8; 4] = 80_877_104u32.to_be_bytes();
        loop {
            let packet = read_message(&mut client_read, None).await?;
            server_write.write_all(&packet).await?;
            let code = &packet[4..];
            if !(code.starts_with(&SSL_REQUEST) || code.starts_with(&GSS_REQUEST)) {
                break;
            }
        }
        // Typed messages: a tag, a length that counts itself, the body.
        loop {
            let tag = match client_read.read_u8().await {
                Ok(tag) => tag,
                Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(error) => return Err(error),
            };
            let message = read_message(&mut client_read, Some(tag)).await?;
            match tag {
                b'E' => {
                    counters.statements.fetch_add(1, Ordering::SeqCst);
                }
                b'Q' => {
                    counters.statements.fetch_add(1, Ordering::SeqCst);
                    counters.round_trips.fetch_add(1, Ordering::SeqCst);
                }
                b'S' => {
                    counters.round_trips.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            }
            server_write.write_all(&message).await?;
        }
        server_write.shutdown().await
    };
    tokio::try_join!(answers, requests).map(|_| ())
}

/// Reads the rest of one message whose tag, if it has one, was read already: its length (which
/// counts itself) and its body. Returns the whole message, tag included, to forward in one
/// write.
async fn read_message(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    tag: Option<u8>,
) -> std::io::Result<Vec<u8>> {
    let length = from.read_u32().await?;
    let mut message = Vec::with_capacity(length as usize + 1);
    message.extend(tag);
    message.extend_from_slice(&length.to_be_bytes());
    let header = message.len();
    message.resize(header + (length as usize).saturating_sub(4), 0);
    from.read_exact(&mut message[header..]).await?;
    Ok(message)
}
