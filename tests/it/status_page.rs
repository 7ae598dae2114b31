//! The status page in a real browser: headless Chromium driven by Selenium
//! (`tests/browser/check_status.py`). It takes the README's screenshot
//! (`target/status-page.png`).

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_in_a_real_browser() {
    require!(
        program("chromium"),
        program("chromedriver"),
        installed("tests/python/.venv-browser")
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let payload = "<script>document.title='pwned';window.pwned=1</script>";
    let gone = ClosedPort::bind();
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{FAST_GLOBAL}servers:\n  - id: good\n    transport: stdio\n    command: {demo:?}\n  \
             - id: xss\n    transport: stdio\n    command: {demo:?}\n    args: [--name, {payload:?}]\n  \
             - id: gone\n    transport: http\n    url: http://127.0.0.1:{}/mcp\n",
            gone.port(),
            demo = demo_server(),
        ),
    )
    .expect("write");
    let mon = Binary::start(&cfg, &["--storage.flush-interval", "500ms"]).await;
    mon.wait_status("good", "healthy", Duration::from_secs(20))
        .await;
    mon.wait_status("gone", "unhealthy", Duration::from_secs(20))
        .await;
    let python = repo().join("tests/python/.venv-browser/bin/python");
    assert!(
        python.exists(),
        "{} missing: run .ci/setup",
        python.display()
    );
    let shot = repo().join("target/status-page.png");
    // Chromium leaves its process-singleton socket directory behind in
    // TMPDIR even after a clean quit: give it one that this test removes.
    let browser_tmp = dir.path().join("browser-tmp");
    std::fs::create_dir(&browser_tmp).expect("browser tmp");
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(&python)
            .arg(repo().join("tests/browser/check_status.py"))
            .arg(format!("http://{}", mon.addr))
            .arg(&shot)
            .env("TMPDIR", &browser_tmp)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the browser checks finish")
    .expect("run the browser checks");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(shot.exists(), "no screenshot");
}
