//! Whole-fleet pages (`/metrics`, `/health/fleet`, `/`) rendered once and
//! shared by the requests that arrive together, off the runtime's workers,
//! with a bound on how many requests may wait for them.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Why a whole-fleet page could not be rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RenderFailed {
    /// As many requests wait for a render as may: answered 503 with
    /// `Retry-After`, as overload is.
    #[error("too many whole-fleet requests at once; try again")]
    Busy,
    /// The render panicked, or the render thread could not be started.
    #[error("the page could not be rendered")]
    Failed,
}

impl IntoResponse for RenderFailed {
    fn into_response(self) -> Response {
        match self {
            RenderFailed::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                format!("{self}\n"),
            )
                .into_response(),
            RenderFailed::Failed => {
                (StatusCode::INTERNAL_SERVER_ERROR, format!("{self}\n")).into_response()
            }
        }
    }
}

/// A render waiting for the render thread.
type Job = Box<dyn FnOnce() + Send>;

/// A thread that runs renders one at a time, from a bounded queue. It
/// ends when its last render is done after the renderer is dropped.
///
/// Renders run on a thread of their own, not on the blocking pool. A
/// render allocates megabytes, and the allocator keeps the pages freed
/// for the arena they came from; the pool's threads each draw their own
/// arena, so renders spread over them left a render's worth of pages
/// behind in each (2.6 MB more resident per scrape at a thousand servers,
/// up to one per arena). On one thread, each render reuses the last one's.
struct Renderer(std::sync::mpsc::SyncSender<Job>);

impl Renderer {
    /// The thread, with room for `queued` renders waiting; `None` if it
    /// could not be started.
    fn start(queued: usize) -> Option<Renderer> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(queued);
        let started = std::thread::Builder::new()
            .name("mcpmon-render".into())
            .spawn(move || {
                for job in rx {
                    // A panicking render drops its sender: its request
                    // is answered 500, and the thread serves the next.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            });
        match started {
            Ok(_) => Some(Renderer(tx)),
            Err(e) => {
                tracing::error!(error = %e, "could not start the render thread");
                None
            }
        }
    }

    /// `f`'s result, run on the thread once the renders queued before it
    /// are done. The queue is full only when requests that gave up left
    /// their renders queued behind a slow one (admission holds the rest
    /// back): [`RenderFailed::Busy`], as admission answers.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, RenderFailed> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            // A request gone while its render waited needs none.
            if !tx.is_closed() {
                let _ = tx.send(f());
            }
        });
        self.0.try_send(job).map_err(|e| match e {
            std::sync::mpsc::TrySendError::Full(_) => RenderFailed::Busy,
            std::sync::mpsc::TrySendError::Disconnected(_) => RenderFailed::Failed,
        })?;
        rx.await.map_err(|_| RenderFailed::Failed)
    }
}

/// How old a render may be and still answer a scrape of the same snapshot
/// (process metrics in it, such as CPU time, age by as much).
pub const RENDER_REUSE: Duration = Duration::from_secs(1);

/// Most requests for whole-fleet pages (`/metrics`, `/health/fleet`, `/`)
/// rendering or waiting for a render at once; more are answered 503. Each
/// waits on a shared render, and a client that never reads its answer
/// holds only a reference to it, not a copy.
pub const MAX_FLEET_RENDERS: usize = 32;

/// The shared renders of every whole-fleet page, the bound on the
/// requests waiting for them, and the thread they run on: one service's
/// own, started with it and ended with it.
pub struct Renders {
    /// `/metrics`, by (snapshot generation, metrics version).
    pub metrics: SharedRender,
    /// `/health/fleet`: its status code and body, by (generation, summary).
    pub fleet: SharedRender<(StatusCode, axum::body::Bytes)>,
    /// `/`, by (generation, a hash of the query).
    pub status: SharedRender,
    admitted: Arc<tokio::sync::Semaphore>,
    /// `None` when the thread could not be started: every render fails.
    renderer: Option<Renderer>,
}

impl Default for Renders {
    /// The renders, and their thread started.
    fn default() -> Self {
        Renders {
            metrics: SharedRender::default(),
            fleet: SharedRender::default(),
            status: SharedRender::default(),
            admitted: Arc::new(tokio::sync::Semaphore::new(MAX_FLEET_RENDERS)),
            renderer: Renderer::start(MAX_FLEET_RENDERS),
        }
    }
}

impl Renders {
    /// Run a render of the whole fleet off the runtime's worker, on the
    /// render thread: at 10 000 servers it takes tens of milliseconds,
    /// which would otherwise delay every probe answer waiting on that
    /// worker and distort its round trip.
    pub async fn off_worker<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, RenderFailed> {
        let renderer = self.renderer.as_ref().ok_or(RenderFailed::Failed)?;
        renderer.run(f).await
    }

    /// A place among the requests for whole-fleet pages, or
    /// [`RenderFailed::Busy`] when they are all taken.
    pub fn admit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, RenderFailed> {
        self.admitted
            .clone()
            .try_acquire_owned()
            .map_err(|_| RenderFailed::Busy)
    }
}

/// One render shared by concurrent requests: at 10 000 servers a
/// `/metrics` render is 30 MB and tens of milliseconds, and two Prometheus
/// replicas (or a scraper and a person) should not each pay for it.
pub struct SharedRender<T = axum::body::Bytes> {
    last: tokio::sync::Mutex<Option<Rendered<T>>>,
}

impl<T> Default for SharedRender<T> {
    fn default() -> Self {
        SharedRender {
            last: tokio::sync::Mutex::new(None),
        }
    }
}

struct Rendered<T> {
    started: tokio::time::Instant,
    key: (u64, u64),
    text: T,
}

impl<T: Clone> SharedRender<T> {
    /// The text for a scrape that `arrived` at some instant: a render that
    /// began after it arrived (as fresh as its own would be, taken without
    /// asking for the state), or one of the same key (snapshot generation,
    /// metrics version) younger than [`RENDER_REUSE`]; otherwise a new one
    /// of the `current` (key, snapshot), asked for once the renders before
    /// it are done. Renders never run concurrently; those waiting get the
    /// result.
    pub async fn get<S, C, F>(
        &self,
        arrived: tokio::time::Instant,
        current: impl FnOnce() -> C,
        render: impl FnOnce(S) -> F,
    ) -> Result<T, RenderFailed>
    where
        C: Future<Output = ((u64, u64), S)>,
        F: Future<Output = Result<T, RenderFailed>>,
    {
        let mut last = self.last.lock().await;
        // A render that began after this request arrived is as fresh as its
        // own would be: no need to ask for the state again.
        if let Some(r) = last.as_ref().filter(|r| r.started >= arrived) {
            return Ok(r.text.clone());
        }
        let (key, snapshot) = current().await;
        if let Some(r) = last.as_ref()
            && r.key == key
            && arrived < r.started + RENDER_REUSE
        {
            return Ok(r.text.clone());
        }
        let started = tokio::time::Instant::now();
        let text = render(snapshot).await?;
        *last = Some(Rendered {
            started,
            key,
            text: text.clone(),
        });
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio::time::Instant;

    /// A render that takes 50 ms and counts itself.
    async fn scrape(shared: &SharedRender, renders: &AtomicU32, generation: u64) -> String {
        let text = shared
            .get(
                Instant::now(),
                || async move { ((generation, 0), generation) },
                |g| async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let n = renders.fetch_add(1, Ordering::SeqCst) + 1;
                    Ok(format!("generation {g} render {n}").into())
                },
            )
            .await
            .expect("rendered");
        String::from_utf8(text.to_vec()).expect("utf-8")
    }

    /// A render that takes a while, so that renders asked for together
    /// overlap (a pool would run them on threads of their own): the thread
    /// it ran on.
    fn slow_render() -> std::thread::ThreadId {
        std::thread::sleep(Duration::from_millis(20));
        std::thread::current().id()
    }

    /// Every render of a service runs on its one render thread, whichever
    /// task asks; a render that panics fails its own request and leaves
    /// the thread serving. Another service's renders have a thread of
    /// their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn renders_share_one_thread_that_outlives_a_panic() {
        let renders = Arc::new(Renders::default());
        let on = || {
            let renders = renders.clone();
            async move { renders.off_worker(slow_render).await }
        };
        let first = on().await.expect("rendered");
        assert_ne!(first, std::thread::current().id(), "off the caller");
        let panicked = renders
            .off_worker(|| -> u8 { panic!("a render that fails") })
            .await;
        assert_eq!(panicked, Err(RenderFailed::Failed));
        let others = futures::future::join_all((0..4).map(|_| tokio::spawn(on()))).await;
        for other in others {
            assert_eq!(other.expect("joined"), Ok(first), "the same thread");
        }
        let another = Renders::default().off_worker(slow_render).await;
        assert_ne!(another, Ok(first), "another service's own thread");
    }

    /// Renders queued past the queue's room are refused as overload (503),
    /// not failed (500); those queued are served once the thread is free.
    #[tokio::test]
    async fn a_full_render_queue_answers_busy() {
        let renderer = Renderer::start(1).expect("started");
        let (free, held) = std::sync::mpsc::channel::<()>();
        let (began_tx, began) = tokio::sync::oneshot::channel();
        let running = renderer.run(move || {
            let _ = began_tx.send(());
            // Bounded: the test frees it below, or it gives up after 10 s.
            let _ = held.recv_timeout(Duration::from_secs(10));
        });
        let mut running = std::pin::pin!(running);
        assert!(futures::poll!(&mut running).is_pending(), "queued");
        began.await.expect("the first render began");
        // The thread is busy with the first: the second takes the room.
        let mut queued = std::pin::pin!(renderer.run(|| 2));
        assert!(futures::poll!(&mut queued).is_pending(), "queued");
        assert_eq!(renderer.run(|| 3).await, Err(RenderFailed::Busy));
        free.send(()).expect("the first render waits");
        assert_eq!(running.await, Ok(()));
        assert_eq!(queued.await, Ok(2));
        let busy = RenderFailed::Busy.into_response();
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "1");
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_scrapes_share_one_render() {
        let shared = SharedRender::default();
        let renders = AtomicU32::new(0);
        let texts = futures::future::join_all((0..10).map(|_| scrape(&shared, &renders, 7))).await;
        assert_eq!(renders.load(Ordering::SeqCst), 1);
        assert!(
            texts.iter().all(|t| t == "generation 7 render 1"),
            "{texts:?}"
        );

        // Same snapshot, under a second later: the same text.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(scrape(&shared, &renders, 7).await, "generation 7 render 1");
        // A newer snapshot is rendered anew...
        assert_eq!(scrape(&shared, &renders, 8).await, "generation 8 render 2");
        // ...and so is the same one once the render is a second old.
        tokio::time::sleep(RENDER_REUSE).await;
        assert_eq!(scrape(&shared, &renders, 8).await, "generation 8 render 3");
    }

    /// Scrapes waiting for a render that began after they arrived take it
    /// without asking for the state: one ask for them all.
    #[tokio::test(start_paused = true)]
    async fn scrapes_sharing_a_render_ask_once() {
        let shared = SharedRender::default();
        let asks = AtomicU32::new(0);
        let scrape = || {
            shared.get(
                Instant::now(),
                || async {
                    asks.fetch_add(1, Ordering::SeqCst);
                    ((1, 0), ())
                },
                |()| async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(axum::body::Bytes::from_static(b"rendered"))
                },
            )
        };
        let texts = futures::future::join_all((0..10).map(|_| scrape())).await;
        assert!(
            texts
                .iter()
                .all(|t| t.as_ref().map(|b| &b[..]) == Ok(&b"rendered"[..]))
        );
        assert_eq!(asks.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_scrape_never_gets_a_render_older_than_itself_of_another_snapshot() {
        let shared = SharedRender::default();
        let renders = AtomicU32::new(0);
        // The second scrape arrives while the first renders generation 1;
        // when its turn comes the fleet is at generation 2, and the render
        // it waited for began before it arrived: it renders again.
        let first = scrape(&shared, &renders, 1);
        let second = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            scrape(&shared, &renders, 2).await
        };
        let (a, b) = tokio::join!(first, second);
        assert_eq!(a, "generation 1 render 1");
        assert_eq!(b, "generation 2 render 2");
    }
}
