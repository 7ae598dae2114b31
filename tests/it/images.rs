//! The Dockerfile, checked without a container engine: hadolint lints it,
//! its stages are what the docs say (a production image with mcpmon only,
//! non-root, labelled, on pinned bases; a node-python variant; the demo
//! image the compose file builds), dependencies are cached apart from the
//! sources, and the dependency step's stub project is run natively to show
//! it still matches the manifest. That the binary reaps orphans as PID 1 is
//! shown by tests/it/pid1.rs, on the same binary the image ships.

use std::path::Path;
use std::process::Command;

use crate::support::*;

/// One stage: its name, base, and instructions (continuations joined).
struct Stage {
    name: String,
    from: String,
    lines: Vec<String>,
}

impl Stage {
    fn has(&self, needle: &str) -> bool {
        self.lines.iter().any(|l| l.contains(needle))
    }
}

fn dockerfile() -> (Vec<(String, String)>, Vec<Stage>) {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(t);
                joined.push(std::mem::take(&mut current));
            }
        }
    }
    let mut args = Vec::new();
    let mut stages: Vec<Stage> = Vec::new();
    for line in joined {
        if let Some(rest) = line.strip_prefix("FROM ") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => name.to_string(),
                _ => String::new(),
            };
            stages.push(Stage {
                name,
                from: words[0].to_owned(),
                lines: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage.lines.push(line);
        } else if let Some(arg) = line.strip_prefix("ARG ")
            && let Some((k, v)) = arg.split_once('=')
        {
            args.push((k.to_owned(), v.to_owned()));
        }
    }
    (args, stages)
}

fn stage<'a>(stages: &'a [Stage], name: &str) -> &'a Stage {
    stages
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no stage {name}"))
}

#[test]
fn hadolint_passes() {
    require!(installed("tests/python/.venv-docker"), program("docker"));
    let hadolint = repo().join("tests/python/.venv-docker/bin/hadolint");
    assert!(
        hadolint.exists(),
        "{} missing: run .ci/setup",
        hadolint.display()
    );
    run_ok(
        Command::new(hadolint)
            .arg("--no-color")
            .arg(repo().join("Dockerfile"))
            .current_dir(repo()),
    );
}

#[test]
fn the_stages_are_production_node_python_and_demo_on_pinned_bases() {
    require!(installed("tests/python/.venv-docker"), program("docker"));
    let (args, stages) = dockerfile();
    // Pinned: every base is a named version, never a floating tag.
    let resolve = |from: &str| -> String {
        match from.strip_prefix("${").and_then(|f| f.strip_suffix('}')) {
            Some(arg) => args
                .iter()
                .find(|(k, _)| k == arg)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("ARG {arg} has no default")),
            None => from.to_owned(),
        }
    };
    for s in &stages {
        let image = resolve(&s.from);
        if stages.iter().any(|o| o.name == image) {
            continue; // another stage
        }
        let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
        assert!(
            tag.chars().filter(char::is_ascii_digit).count() >= 3 && !tag.contains("latest"),
            "stage {:?}: base {image} is not pinned to a version",
            s.name
        );
    }

    // The default target (the last stage) is the production image.
    let last = stages.last().expect("stages");
    assert_eq!(last.name, "production");
    let runtime = stage(&stages, "runtime");
    assert_eq!(last.from, "runtime");
    assert!(last.has("USER 10001:10001"), "production runs as non-root");
    for s in [runtime, last] {
        let copies: Vec<&String> = s.lines.iter().filter(|l| l.starts_with("COPY")).collect();
        assert!(
            copies
                .iter()
                .all(|l| !l.contains("demo-server") && !l.contains("fleet.yaml")),
            "no demo in production: {copies:?}"
        );
    }
    assert!(runtime.has("COPY --from=build /src/target/release/mcpmon /usr/local/bin/mcpmon"));
    assert!(runtime.has(r#"ENTRYPOINT ["/usr/local/bin/mcpmon"]"#));
    for label in ["title", "source", "version", "revision", "licenses"] {
        assert!(
            runtime.has(&format!("org.opencontainers.image.{label}=")),
            "OCI label {label} missing"
        );
    }

    // The revision reaches the build (mcpmon_build_info{revision}).
    let build = stage(&stages, "build");
    let env_at = build
        .lines
        .iter()
        .position(|l| l.starts_with("ENV MCPMON_REVISION="))
        .expect("ENV MCPMON_REVISION");
    let last_build = build
        .lines
        .iter()
        .rposition(|l| l.contains("cargo build"))
        .expect("cargo build");
    assert!(env_at < last_build);
    // Dependencies are built from the manifests before the sources arrive.
    let manifests = build
        .lines
        .iter()
        .position(|l| l.starts_with("COPY Cargo.toml Cargo.lock"))
        .expect("manifests");
    let deps = build
        .lines
        .iter()
        .position(|l| l.contains("cargo build"))
        .expect("deps build");
    let sources = build
        .lines
        .iter()
        .position(|l| l.starts_with("COPY src"))
        .expect("sources");
    assert!(
        manifests < deps && deps < sources,
        "dependency layer comes first"
    );

    let node = stage(&stages, "node-python");
    assert!(
        node.has("nodejs") && node.has("npm") && node.has("/uvx"),
        "node-python has npx and uvx"
    );
    assert!(node.has("USER 10001:10001"));
    let demo = stage(&stages, "demo");
    assert!(demo.has("demo-server") && demo.has("fleet.yaml"));

    // The compose stack builds the demo image.
    let compose = std::fs::read_to_string(repo().join("docker-compose.yml")).expect("compose");
    assert!(compose.contains("target: demo"), "{compose}");
}

#[test]
fn the_dependency_step_stub_matches_the_manifest() {
    require!(installed("tests/python/.venv-docker"), program("docker"));
    // Run the stub step's commands natively, in a copy of the manifests, with
    // `cargo` standing for `cargo metadata`: the stub must still be a valid
    // package holding every target the step builds.
    let (_, stages) = dockerfile();
    let build = stage(&stages, "build");
    let step = build
        .lines
        .iter()
        .find(|l| l.starts_with("RUN ") && l.contains("cargo build"))
        .expect("stub step")
        .trim_start_matches("RUN ")
        .to_owned();
    let dir = tempfile::tempdir().expect("tempdir");
    for f in ["Cargo.toml", "Cargo.lock"] {
        std::fs::copy(repo().join(f), dir.path().join(f)).expect("copy");
    }
    let shim = dir.path().join("bin");
    std::fs::create_dir(&shim).expect("mkdir");
    let cargo = which("cargo");
    let metadata = dir.path().join("metadata.json");
    std::fs::write(
        shim.join("cargo"),
        format!(
            "#!/bin/sh\necho \"$@\" > {args}\nexec {cargo} metadata --locked --offline --format-version 1 --no-deps > {out}\n",
            args = dir.path().join("args").display(),
            cargo = cargo.display(),
            out = metadata.display()
        ),
    )
    .expect("shim");
    run_chmod(&shim.join("cargo"));
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    run_ok(
        Command::new("sh")
            .arg("-c")
            .arg(&step)
            .current_dir(dir.path())
            .env("PATH", path),
    );
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&metadata).expect("metadata")).expect("json");
    let targets: Vec<(String, String)> = meta["packages"][0]["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| {
            (
                t["kind"][0].as_str().unwrap_or("").to_owned(),
                t["name"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let asked = std::fs::read_to_string(dir.path().join("args")).expect("args");
    for (flag, kind) in [("--bin", "bin"), ("--example", "example")] {
        let mut words = asked.split_whitespace();
        while let Some(w) = words.next() {
            if w == flag {
                let name = words.next().expect("target name");
                assert!(
                    targets.iter().any(|(k, n)| k == kind && n == name),
                    "the stub has no {kind} {name}: {targets:?}"
                );
            }
        }
    }
    assert!(
        !Path::new(&dir.path().join("src")).exists(),
        "the stubs are removed"
    );
}

fn run_chmod(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}
