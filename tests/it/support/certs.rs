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
