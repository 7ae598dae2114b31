//! The `file_sd_configs` and `http_sd_configs` of the main file.

use super::*;
use crate::config::kubernetes::{KubeSd, KubeSdFile};
use crate::config::sd::SdTlsFile;

impl Validator<'_> {
    /// A `file_sd_configs` entry: patterns in Prometheus's form
    /// (`^[^*]*(\*[^/]*)?\.(json|yml|yaml)$`), relative to the config file.
    pub(super) fn file_sd(&mut self, f: FileSdFile, at: &[Seg]) -> Option<FileSd> {
        let sub = |name: &str| under(at, name);
        if f.files.is_empty() {
            self.error(
                &sub("files"),
                "file_sd_configs: `files` needs at least one pattern".to_owned(),
            );
        }
        let mut files = Vec::new();
        for (i, pattern) in f.files.iter().enumerate() {
            let mut p = sub("files");
            p.push(Seg::Index(i));
            let (dir, name) = match pattern.rsplit_once('/') {
                Some((d, n)) => (d, n),
                None => ("", pattern.as_str()),
            };
            let lower = name.to_ascii_lowercase();
            let ext_ok = [".json", ".yml", ".yaml"]
                .iter()
                .any(|e| lower.ends_with(e));
            if dir.contains('*') || name.matches('*').count() > 1 || !ext_ok {
                self.error(
                    &p,
                    format!(
                        "file pattern {pattern:?}: only the file name may hold one `*`, and it must end in .json, .yml or .yaml"
                    ),
                );
                continue;
            }
            if let Err(e) = glob::Pattern::new(name) {
                self.error(&p, format!("file pattern {pattern:?}: {e}"));
                continue;
            }
            files.push(self.base.join(pattern));
        }
        let refresh_interval = f.refresh_interval.map_or(FILE_SD_REFRESH, |d| d.0);
        if refresh_interval.is_zero() {
            self.error(
                &sub("refresh_interval"),
                "refresh_interval must be greater than zero".to_owned(),
            );
        }
        self.labels(&f.labels, &sub("labels"));
        Some(FileSd {
            files,
            refresh_interval,
            labels: f.labels,
            max_servers: f.max_servers.unwrap_or(super::sd::MAX_SERVERS),
            client: None,
        })
    }

    /// A `client_config_sd_configs` entry: patterns (a folder may hold a
    /// wildcard too), relative to the config file, read as client configs.
    pub(super) fn client_sd(&mut self, c: ClientSdFile, at: &[Seg]) -> Option<FileSd> {
        let sub = |name: &str| under(at, name);
        if c.files.is_empty() {
            self.error(
                &sub("files"),
                "client_config_sd_configs: `files` needs at least one pattern".to_owned(),
            );
        }
        let mut files = Vec::new();
        for (i, pattern) in c.files.iter().enumerate() {
            let mut p = sub("files");
            p.push(Seg::Index(i));
            // Any segment may be a pattern (`/srv/*/.mcp.json`: one file a
            // project), each a glob of its own, none a `**`.
            let bad = pattern
                .split('/')
                .find(|seg| seg.contains("**") || glob::Pattern::new(seg).is_err());
            if let Some(seg) = bad {
                self.error(
                    &p,
                    format!(
                        "file pattern {pattern:?}: {seg:?} is not a pattern of one folder or file name (`*`, `?`, `[…]`; no `**`)"
                    ),
                );
                continue;
            }
            files.push(self.base.join(pattern));
        }
        let refresh_interval = c.refresh_interval.map_or(FILE_SD_REFRESH, |d| d.0);
        if refresh_interval.is_zero() {
            self.error(
                &sub("refresh_interval"),
                "refresh_interval must be greater than zero".to_owned(),
            );
        }
        self.labels(&c.labels, &sub("labels"));
        Some(FileSd {
            files,
            refresh_interval,
            labels: c.labels,
            max_servers: c.max_servers.unwrap_or(super::sd::MAX_SERVERS),
            client: Some(c.format),
        })
    }

    /// An `http_sd_configs` entry.
    pub(super) fn http_sd(&mut self, h: HttpSdFile, at: &[Seg]) -> Option<HttpSd> {
        let sub = |name: &str| under(at, name);
        let expanded = self.expand(&h.url, &sub("url"));
        let url = match url::Url::parse(&expanded) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            _ => {
                self.error(
                    &sub("url"),
                    format!("http_sd url {:?} is not an http(s) URL", h.url),
                );
                return None;
            }
        };
        let refresh_interval = h.refresh_interval.map_or(HTTP_SD_REFRESH, |d| d.0);
        if refresh_interval.is_zero() {
            self.error(
                &sub("refresh_interval"),
                "refresh_interval must be greater than zero".to_owned(),
            );
        }
        let headers = self.headers(&h.headers, &sub("headers"));
        let bearer_token = h
            .bearer_token_env
            .as_deref()
            .and_then(|var| self.env_secret(var, &sub("bearer_token_env")));
        let tls = self.sd_tls(&h.tls, &sub("tls"));
        self.labels(&h.labels, &sub("labels"));
        Some(HttpSd {
            url,
            refresh_interval,
            headers,
            bearer_token,
            tls,
            labels: h.labels,
            allow_stdio: h.allow_stdio,
            max_servers: h.max_servers.unwrap_or(super::sd::MAX_SERVERS),
            registry: None,
        })
    }

    /// A `registry_sd_configs` entry: validated as an http_sd entry that
    /// may never start a process.
    pub(super) fn registry_sd(&mut self, r: RegistrySdFile, at: &[Seg]) -> Option<HttpSd> {
        let default_refresh = r.refresh_interval.is_none();
        let (http, search) = r.split();
        let mut sd = self.http_sd(http, at)?;
        if default_refresh {
            sd.refresh_interval = REGISTRY_SD_REFRESH;
        }
        sd.registry = Some(RegistryQuery { search });
        Some(sd)
    }

    /// A discovery source's `tls:`: each file must be readable, and a
    /// client certificate comes with its key.
    pub(in crate::config) fn sd_tls(&mut self, t: &SdTlsFile, at: &[Seg]) -> SdTls {
        let mut file = |name: &str, value: &Option<String>| -> Option<PathBuf> {
            let path = self.base.join(value.as_deref()?);
            if let Err(e) = std::fs::metadata(&path) {
                self.error(
                    &under(at, name),
                    format!("cannot read {}: {e}", path.display()),
                );
            }
            Some(path)
        };
        let tls = SdTls {
            ca_file: file("ca_file", &t.ca_file),
            cert_file: file("cert_file", &t.cert_file),
            key_file: file("key_file", &t.key_file),
            insecure_skip_verify: t.insecure_skip_verify,
        };
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            self.error(at, "set both cert_file and key_file, or neither".to_owned());
        }
        tls
    }
}

impl Validator<'_> {
    /// A `kubernetes_sd_configs` entry; every problem named at its key.
    pub(super) fn kubernetes_sd(&mut self, k: KubeSdFile, at: &[Seg]) -> Option<KubeSd> {
        let sub = |name: &str| under(at, name);
        let api_server = match k.api_server.as_deref() {
            None => None,
            Some(s) => match url::Url::parse(s) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => Some(u),
                _ => {
                    self.error(
                        &sub("api_server"),
                        format!("api_server {s:?} is not an http(s) URL"),
                    );
                    return None;
                }
            },
        };
        if api_server.is_some() && k.kubeconfig_file.is_some() {
            self.error(
                &sub("api_server"),
                "api_server and kubeconfig_file are exclusive: the kubeconfig names its server"
                    .to_owned(),
            );
        }
        let mut label_selector = None;
        let mut field_selector = None;
        for (i, s) in k.selectors.iter().enumerate() {
            let mut p = sub("selectors");
            p.push(Seg::Index(i));
            if s.role.is_some_and(|r| r != k.role) {
                p.push(Seg::key("role"));
                self.error(
                    &p,
                    format!(
                        "a selector for another role than this config's ({})",
                        k.role.as_str()
                    ),
                );
                continue;
            }
            // Several selectors of one role are ANDed, as Kubernetes reads
            // a comma.
            let join = |into: &mut Option<String>, add: &Option<String>| {
                if let Some(add) = add {
                    *into = Some(match into.take() {
                        Some(old) => format!("{old},{add}"),
                        None => add.clone(),
                    });
                }
            };
            join(&mut label_selector, &s.label);
            join(&mut field_selector, &s.field);
        }
        let file = |v: &mut Self, name: &str, value: Option<&str>| -> Option<PathBuf> {
            let path = v.base.join(value?);
            if let Err(e) = std::fs::metadata(&path) {
                v.error(&sub(name), format!("cannot read {}: {e}", path.display()));
            }
            Some(path)
        };
        let kubeconfig_file = file(self, "kubeconfig_file", k.kubeconfig_file.as_deref());
        let bearer_token_file = file(self, "bearer_token_file", k.bearer_token_file.as_deref());
        let tls = self.sd_tls(&k.tls, &sub("tls"));
        self.labels(&k.labels, &sub("labels"));
        Some(KubeSd {
            role: k.role,
            namespaces: k.namespaces.names,
            own_namespace: k.namespaces.own_namespace,
            label_selector,
            field_selector,
            kubeconfig_file,
            api_server,
            tls,
            bearer_token_file,
            labels: k.labels,
            max_servers: k.max_servers.unwrap_or(super::sd::MAX_SERVERS),
        })
    }
}
