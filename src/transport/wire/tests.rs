//! An origin's connections against a real hyper server on 127.0.0.1: kept
//! and reused, dropped when an answer is left half read, replaced when the
//! server closes them.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::{Body, Origin, Wire};
use crate::config::TlsSpec;
use crate::transport::tls;

/// A server that answers every request with `hello` (at `/endless`, and
/// then nothing, never ending), counting the connections it accepted;
/// `keep_alive` false closes each after one answer.
async fn server(keep_alive: bool) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let answer = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    let hello = futures::stream::iter([Ok::<_, Infallible>(Frame::data(
                        Bytes::from_static(b"hello"),
                    ))]);
                    let body = if req.uri().path() == "/endless" {
                        BodyExt::boxed(StreamBody::new(hello.chain(futures::stream::pending())))
                    } else {
                        // With its length: hyper has all of it at once.
                        BodyExt::boxed(Full::new(Bytes::from_static(b"hello")))
                    };
                    Ok::<_, Infallible>(Response::new(body))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(keep_alive)
                    .serve_connection(TokioIo::new(tcp), answer)
                    .await;
            });
        }
    });
    (url, accepted)
}

fn origin(url: &str) -> Origin {
    let config = tls::client_config(&TlsSpec::default(), tls::Seen::default()).expect("tls");
    Wire::new(&config)
        .origin(&url.parse().expect("uri"))
        .expect("origin")
}

fn post(url: &str) -> Request<Body> {
    Request::post(url)
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("request")
}

async fn read(origin: &Origin, url: &str) -> Bytes {
    let answer = origin.send(post(url), false).await.expect("answer");
    answer.into_body().collect().await.expect("body").to_bytes()
}

#[tokio::test]
async fn answers_read_to_the_end_leave_their_connection_for_the_next_request() {
    let (url, accepted) = server(true).await;
    let config = tls::client_config(&TlsSpec::default(), tls::Seen::default()).expect("tls");
    let wire = Wire::new(&config);
    let origin = wire.origin(&url.parse().expect("uri")).expect("origin");
    for _ in 0..5 {
        assert_eq!(read(&origin, &url).await, "hello");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    // Another server behind the same origin (its own path), looked up on
    // the same wire, shares it.
    let other = url.replace("/mcp", "/other");
    let neighbour = wire.origin(&other.parse().expect("uri")).expect("origin");
    assert_eq!(read(&neighbour, &other).await, "hello");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_answer_dropped_unread_keeps_its_connection_when_hyper_has_it_all() {
    let (url, accepted) = server(true).await;
    let origin = origin(&url);
    let unread = origin.send(post(&url), false).await.expect("answer");
    // What a stream's reader does once the answer it wants has come.
    let mut body = unread.into_body();
    let _ = body.frame().await;
    drop(body);
    assert_eq!(read(&origin, &url).await, "hello");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_answer_dropped_with_more_to_come_takes_its_connection_with_it() {
    let (url, accepted) = server(true).await;
    let endless = url.replace("/mcp", "/endless");
    let origin = origin(&url);
    let answer = origin.send(post(&endless), false).await.expect("answer");
    let mut body = answer.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert_eq!(first.into_data().expect("data"), "hello");
    drop(body);
    assert_eq!(read(&origin, &url).await, "hello");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn requests_at_once_each_get_a_connection_and_both_are_kept() {
    let (url, accepted) = server(true).await;
    let origin = origin(&url);
    let (a, b) = tokio::join!(
        origin.send(post(&url), false),
        origin.send(post(&url), false)
    );
    for answer in [a, b] {
        let body = answer.expect("answer").into_body().collect().await;
        assert_eq!(body.expect("body").to_bytes(), "hello");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    for _ in 0..4 {
        assert_eq!(read(&origin, &url).await, "hello");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_connection_the_server_closed_is_replaced_without_an_error() {
    let (url, accepted) = server(false).await;
    let origin = origin(&url);
    for _ in 0..3 {
        assert_eq!(read(&origin, &url).await, "hello");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_url_without_a_host_names_no_origin() {
    let config = tls::client_config(&TlsSpec::default(), tls::Seen::default()).expect("tls");
    assert!(
        Wire::new(&config)
            .origin(&"/mcp".parse().expect("uri"))
            .is_err()
    );
}

#[tokio::test]
async fn a_request_s_future_stays_small_enough_to_move_on_every_ping() {
    let (url, _) = server(true).await;
    let origin = origin(&url);
    let send = origin.send(post(&url), false);
    let size = std::mem::size_of_val(&send);
    // About 1 KiB: the request and the send on an open connection. With
    // a new connection's handshakes inline it was 7 KiB, copied at each
    // move.
    assert!(size <= 2048, "{size} bytes");
}
