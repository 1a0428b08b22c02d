//! The accept loop of `mend serve`: HTTP/1 connections, each bounded in number and in time,
//! and the shutdown that drains them within a deadline.
//!
//! - **A connection limit.** A connection past `serve.max_connections` is answered a canned
//!   503 and closed at once: it never waits in a queue, and the process keeps file descriptors
//!   for the connections it serves.
//! - **Header and idle timeouts.** A connection with no request in progress is closed once it
//!   has waited `serve.idle_timeout_ms` without sending a byte, or `serve.header_read_timeout_ms`
//!   after the first byte of a request head that is still not complete. (hyper's own header
//!   timeout starts when the connection is ready for a request, so it cannot tell a slow head
//!   from an idle keep-alive connection; a watchdog per connection tells them apart.) The body
//!   deadline is a layer around the router ([`super::limits::read_body`]).
//! - **TLS**, when the server has it ([`super::tls`]): the handshake must finish within the
//!   header timeout; a connection that sends plain HTTP is answered 400 and closed. The
//!   client's certificate, if it presented one, goes with each of its requests
//!   ([`ClientCertificate`]) for the access check. After the TLS files were reloaded, a
//!   connection's next request first verifies its client's chain again against the client CA
//!   then in force ([`Tls::admits`]): one it no longer admits is answered 401 and the
//!   connection closed, so that rotating the CA shuts out the connections opened before.
//! - **A shutdown deadline.** Once the shutdown future completes, the listener is closed, every
//!   connection finishes the request it is answering and closes, and whatever is still open
//!   after `serve.shutdown_deadline_ms` is dropped. Admitted writes run on tasks of their own
//!   ([`super::writes`]): dropping a connection never cancels one.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use super::error::{ApiError, ErrorCode};
use super::guessing::ClientAddress;
use super::tls::{ClientChain, Tls, TlsError};
use rustls_pki_types::{CertificateDer, UnixTime};
use tokio::time::Instant;
use tower::ServiceExt;

/// The connection limits; see the module doc.
#[derive(Debug, Clone, Copy)]
pub(super) struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub shutdown_deadline: Duration,
}

/// What a connection past the limit reads before it is closed.
const TOO_MANY_CONNECTIONS: &str = concat!(
    "HTTP/1.1 503 Service Unavailable\r\n",
    "content-type: application/json\r\n",
    "retry-after: 1\r\n",
    "connection: close\r\n",
    "content-length: 152\r\n",
    "\r\n",
    r#"{"error":"too_many_connections","message":"the server has as many connections open as serve.max_connections allows; retry","certainly_not_applied":true}"#,
);

/// Serves `router` on `listener` until `shutdown` completes, then drains the connections
/// within the shutdown deadline. Returns once every connection is closed or dropped.
pub(super) async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    tls: Option<Arc<Tls>>,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    // Logged when accepting starts failing (out of file descriptors), not on every attempt.
    let mut accept_failing = false;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    accept_failing = false;
                    match permits.clone().try_acquire_owned() {
                        Ok(permit) => {
                            connections.spawn(connection(
                                stream,
                                ClientAddress(peer.ip()),
                                router.clone(),
                                limits,
                                tls.clone(),
                                stopped.clone(),
                                permit,
                            ));
                        }
                        Err(_) => refuse(stream),
                    }
                }
                Err(error) => {
                    if !accept_failing {
                        tracing::warn!(%error, "cannot accept connections; retrying");
                        accept_failing = true;
                    }
                    // Out of file descriptors the same error comes back at once: wait for
                    // connections to close instead of spinning.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(limits.shutdown_deadline, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "dropping {} connection(s) still open after the shutdown deadline of {} ms",
            connections.len(),
            limits.shutdown_deadline.as_millis()
        );
        connections.shutdown().await;
    }
}

/// Answers a connection past the limit and closes it, without waiting for anything. The
/// answer fits the socket's empty send buffer. What the client already sent is read first
/// where it has arrived: closing with unread bytes resets the connection, and the client
/// might lose the answer.
fn refuse(stream: TcpStream) {
    let _ = stream.try_write(TOO_MANY_CONNECTIONS.as_bytes());
    let mut unread = [0u8; 4096];
    for _ in 0..4 {
        match stream.try_read(&mut unread) {
            Ok(read) if read > 0 => {}
            _ => break,
        }
    }
}

/// The certificate a client presented in its TLS handshake (verified against
/// `serve.tls_client_ca_file`), in each of its requests' extensions.
#[derive(Debug, Clone)]
pub(crate) struct ClientCertificate(pub(crate) Arc<CertificateDer<'static>>);

/// A client that presented a certificate in its handshake: the certificate for the access
/// check, and its chain to verify again once the TLS files were reloaded.
#[derive(Debug, Clone)]
struct CertifiedClient {
    certificate: ClientCertificate,
    chain: Arc<ClientChain>,
    tls: Arc<Tls>,
}

/// Serves one connection until it closes, its watchdog fires, or it has drained after a
/// shutdown began; over TLS when the server has it.
async fn connection(
    stream: TcpStream,
    address: ClientAddress,
    router: Router,
    limits: ConnectionLimits,
    tls: Option<Arc<Tls>>,
    stopped: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) {
    let Some(tls) = tls else {
        return serve_http(stream, address, None, router, limits, stopped, permit).await;
    };
    // The handshake is part of the head: it has the header timeout.
    let handshake = async {
        let mut first = [0u8; 1];
        match stream.peek(&mut first).await {
            Ok(1) if first[0] == super::tls::HANDSHAKE_RECORD => {}
            Ok(1) => {
                use tokio::io::AsyncWriteExt;
                let mut stream = stream;
                let _ = stream
                    .write_all(super::tls::not_tls_answer().as_bytes())
                    .await;
                let _ = stream.shutdown().await;
                return None;
            }
            _ => return None,
        }
        let (acceptor, generation) = tls.acceptor();
        match acceptor.accept(stream).await {
            Ok(stream) => Some((stream, generation)),
            Err(error) => {
                tracing::debug!(%error, "a TLS handshake failed; the connection is closed");
                None
            }
        }
    };
    let Ok(Some((stream, generation))) =
        tokio::time::timeout(limits.header_read_timeout, handshake).await
    else {
        return;
    };
    let client = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|presented| ClientChain::new(presented, generation))
        .map(|chain| CertifiedClient {
            certificate: ClientCertificate(Arc::new(chain.end_entity().clone())),
            chain: Arc::new(chain),
            tls: tls.clone(),
        });
    serve_http(stream, address, client, router, limits, stopped, permit).await;
}

/// For a client whose certificate the client CA in force no longer admits, the answer to its
/// request: 401, closing the connection (its next request would be refused all the same).
/// `None` for a client it admits.
fn refusal(client: &CertifiedClient) -> Option<Response> {
    let refused = client.tls.admits(&client.chain, UnixTime::now()).err()?;
    tracing::info!(
        error = %refused,
        "a connection's client certificate is no longer admitted by the client CA in force: \
         answered 401, and the connection closed"
    );
    Some(no_longer_admitted(&refused))
}

/// The answer to a request on a connection whose client certificate is no longer admitted.
fn no_longer_admitted(refused: &TlsError) -> Response {
    let message = format!(
        "{refused}; this connection is closed: connect again with a certificate the client CA \
         signs, or with Authorization: Bearer TOKEN. Nothing happened"
    );
    let mut answer = ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
        .with_header(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))
        .into_response();
    answer
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// Serves HTTP/1 on `stream` until it closes, its watchdog fires, or it has drained after a
/// shutdown began.
async fn serve_http<S>(
    stream: S,
    address: ClientAddress,
    client: Option<CertifiedClient>,
    router: Router,
    limits: ConnectionLimits,
    mut stopped: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        stream,
        activity: activity.clone(),
    });
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let open = OpenRequest::new(requests.clone());
        let router = router.clone();
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(address);
        let refused = client.as_ref().and_then(|client| {
            request.extensions_mut().insert(client.certificate.clone());
            refusal(client)
        });
        async move {
            let response = match refused {
                Some(refusal) => refusal,
                None => match router.oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                },
            };
            Ok::<_, Infallible>(response.map(|body| Answer { body, _open: open }))
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    // The watchdog times heads and idle connections; see the module doc.
    http.timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true);
    let served = http.serve_connection(io, service);
    tokio::pin!(served);
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = served.as_mut() => return,
            () = activity.expired(limits) => return,
            _ = stopped.changed(), if !stopping => {
                stopping = true;
                served.as_mut().graceful_shutdown();
            }
        }
    }
}

/// What a connection's watchdog knows: requests in progress, and since when the connection
/// has waited for the next one.
#[derive(Debug)]
struct Activity {
    state: Mutex<ActivityState>,
}

#[derive(Debug)]
struct ActivityState {
    open_requests: usize,
    /// When the connection was last ready for a request: opened, or its last answer done.
    waiting_since: Instant,
    /// The first byte read since then: a request head has begun.
    head_started: Option<Instant>,
}

impl Activity {
    fn new() -> Self {
        Self {
            state: Mutex::new(ActivityState {
                open_requests: 0,
                waiting_since: Instant::now(),
                head_started: None,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_some(&self) {
        let mut state = self.state();
        if state.open_requests == 0 && state.head_started.is_none() {
            state.head_started = Some(Instant::now());
        }
    }

    /// Completes when the connection has waited too long for a request or its head: the
    /// deadline only ever moves later, so it is checked again on waking.
    async fn expired(&self, limits: ConnectionLimits) {
        loop {
            let deadline = {
                let state = self.state();
                if state.open_requests > 0 {
                    None
                } else {
                    Some(match state.head_started {
                        Some(started) => started + limits.header_read_timeout,
                        None => state.waiting_since + limits.idle_timeout,
                    })
                }
            };
            match deadline {
                Some(deadline) if Instant::now() >= deadline => return,
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                // A request is being answered: neither clock runs; look again later.
                None => {
                    tokio::time::sleep(limits.header_read_timeout.min(limits.idle_timeout)).await
                }
            }
        }
    }
}

/// A request from the moment its head is read until its answer's body is dropped (sent, or
/// the connection gone).
#[derive(Debug)]
struct OpenRequest {
    activity: Arc<Activity>,
}

impl OpenRequest {
    fn new(activity: Arc<Activity>) -> Self {
        let mut state = activity.state();
        state.open_requests += 1;
        state.head_started = None;
        drop(state);
        Self { activity }
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        let mut state = self.activity.state();
        state.open_requests -= 1;
        if state.open_requests == 0 {
            state.waiting_since = Instant::now();
            state.head_started = None;
        }
    }
}

/// An answer's body, holding its request open until hyper is done with it.
#[derive(Debug)]
struct Answer {
    body: Body,
    _open: OpenRequest,
}

impl hyper::body::Body for Answer {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection's stream (its socket, or TLS over it), telling its watchdog when bytes
/// arrive.
#[derive(Debug)]
struct Watched<S> {
    stream: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read_some();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_one_json_answer_of_the_length_it_declares() {
        let (head, body) = TOO_MANY_CONNECTIONS.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        // The documented error body, and nothing it does not document.
        let body: crate::error::ErrorBody = serde_json::from_str(body).unwrap();
        assert_eq!(body.error, crate::error::ErrorCode::TooManyConnections);
    }
}
