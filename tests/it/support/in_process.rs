//! mcpmon run in-process on a port-0 listener.

use std::time::Duration;

use super::*;
use std::net::SocketAddr;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// mcpmon running in-process on 127.0.0.1:0.
pub struct Monitor {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), mcpmon::RunError>>>,
    _dir: tempfile::TempDir,
    _turn: Option<Turn>,
}

impl Monitor {
    /// Start on a config text (paths in it should be absolute).
    pub async fn start(yaml: &str) -> Monitor {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fleet.yaml");
        std::fs::write(&path, yaml).expect("write config");
        let config =
            mcpmon::config::load(&path).unwrap_or_else(|e| panic!("bad test config:\n{e}"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(mcpmon::run(config, listener, async move {
            let _ = rx.await;
        }));
        let http = test_client();
        Monitor {
            addr,
            http,
            stop: Some(tx),
            task: Some(task),
            _dir: dir,
            _turn: turn().await,
        }
    }

    /// Stop and wait for a clean return.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let r = tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("mcpmon stops within 20s")
                .expect("mcpmon task panicked");
            r.expect("mcpmon returned an error");
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}
