//! Certificates made with openssl for TLS tests.

use std::path::{Path, PathBuf};

/// A self-signed server certificate for 127.0.0.1 in `dir`: (cert, key).
/// `leaf` marks it as an end-entity certificate, so a client can trust it
/// directly as its root.
pub fn self_signed_cert(dir: &Path, leaf: bool) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let mut cmd = std::process::Command::new("openssl");
    cmd.args([
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
    ])
    .args([
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
    ]);
    if leaf {
        cmd.args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .args(["-addext", "extendedKeyUsage=serverAuth"]);
    }
    let out = cmd
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a client certificate it signed, in `dir`: (`ca.pem`, the
/// client's certificate and key in one PEM, as TLS clients take them).
pub fn client_cert(dir: &Path) -> (PathBuf, Vec<u8>) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=prometheus",
            "-keyout",
            "client.key",
            "-out",
            "client.csr",
        ],
    );
    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=critical,CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .expect("write");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "client.ext",
            "-out",
            "client.pem",
        ],
    );
    let mut identity = std::fs::read(dir.join("client.pem")).expect("client cert");
    identity.extend(std::fs::read(dir.join("client.key")).expect("client key"));
    (dir.join("ca.pem"), identity)
}

/// A self-signed leaf certificate valid from `start` to `end` (openssl's
/// `YYYYMMDDHHMMSSZ`), for `san` (`DNS:…` or `IP:…`), named `name` in
/// `dir`: (`name.pem`, the certificate and key in one PEM as HAProxy takes
/// them). `openssl ca` is the one openssl 3.0 tool that takes both dates,
/// so an expired certificate can be made as easily as a valid one.
pub fn dated_cert(dir: &Path, name: &str, san: &str, start: &str, end: &str) -> (PathBuf, PathBuf) {
    let work = dir.join(format!("{name}-ca"));
    std::fs::create_dir_all(&work).expect("mkdir");
    std::fs::write(work.join("index.txt"), "").expect("write");
    std::fs::write(work.join("serial"), "01\n").expect("write");
    std::fs::write(
        work.join("ca.cnf"),
        format!(
            "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n\
             default_md = sha256\npolicy = p\nunique_subject = no\n[p]\ncommonName = supplied\n\
             [ext]\nbasicConstraints = critical,CA:FALSE\nextendedKeyUsage = serverAuth\nsubjectAltName = {san}\n"
        ),
    )
    .expect("write");
    openssl(
        &work,
        &[
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=mcpmon-test",
            "-keyout",
            "key.pem",
            "-out",
            "req.csr",
        ],
    );
    openssl(
        &work,
        &[
            "ca",
            "-batch",
            "-selfsign",
            "-config",
            "ca.cnf",
            "-extensions",
            "ext",
            "-keyfile",
            "key.pem",
            "-in",
            "req.csr",
            "-out",
            "cert.pem",
            "-startdate",
            start,
            "-enddate",
            end,
            "-notext",
        ],
    );
    let cert = dir.join(format!("{name}.pem"));
    std::fs::copy(work.join("cert.pem"), &cert).expect("copy");
    let combined = dir.join(format!("{name}-combined.pem"));
    let mut pem = std::fs::read(work.join("cert.pem")).expect("cert");
    pem.extend(std::fs::read(work.join("key.pem")).expect("key"));
    std::fs::write(&combined, pem).expect("write");
    (cert, combined)
}
