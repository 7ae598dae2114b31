//! One server entry: its id, tunables, probes, transport and labels.

use super::probes::Written;
use super::*;
use crate::config::condition::{self, Condition, Subject};
use crate::config::raw::ConditionFile;

impl Validator<'_> {
    /// One server entry resolved against the global tunables, every
    /// problem in it reported; `None` when it cannot be monitored at all.
    pub(super) fn check_server(
        &mut self,
        mut s: ServerFile,
        global: &TunablesFile,
        at: &[Seg],
        seen: &mut HashSet<String>,
    ) -> Option<ServerSpec> {
        let expanded_from = self.expanded.len();
        self.check_id(&s.id, at, seen);
        let written = self.written_probes(&mut s.tunables.0, at);
        let settings = self.server_settings(&s, global, at);
        let probes = self.probes(&written, &settings);
        let mut conditions = self.conditions(
            &s.health_check_conditions,
            Subject::HealthReport,
            &under(at, "health_check_conditions"),
        );
        conditions.extend(self.conditions(
            &s.tools_conditions,
            Subject::Tools,
            &under(at, "tools_conditions"),
        ));
        self.unique_condition_names(&s, &written, at);
        let protocol = if settings.protocol == "auto" {
            Protocol::Auto
        } else {
            Protocol::Pinned(settings.protocol.clone())
        };
        let transport = match s.transport {
            TransportKind::Stdio => self.stdio_transport(&s, at)?,
            TransportKind::Http => self.http_transport(&s, at, false)?,
            TransportKind::Sse => self.http_transport(&s, at, true)?,
        };
        let labels = self.labels(&s.labels, &under(at, "labels"));
        let expanded = self
            .expanded
            .split_off(expanded_from)
            .into_iter()
            .map(Secret::new)
            .collect();
        let mut spec = ServerSpec {
            id: s.id,
            transport,
            settings,
            protocol,
            probes,
            expanded,
            expected_tools: s.expected_tools,
            conditions,
            labels,
            trust: self.trust,
            scrubber: Default::default(),
            // Bounded: it is shown and exported as a label value.
            operator: s.operator.map(|o| crate::config::OperatorWord {
                kind: crate::config::defuse(&o.kind, 64),
                phase: o.phase.map(|p| crate::config::defuse(&p, 64)),
                ready: o.ready,
            }),
        };
        spec.scrubber = std::sync::Arc::new(crate::redact::Scrubber::new(spec.secrets()));
        Some(spec)
    }

    /// An id is a metric label value and a URL path segment: a closed
    /// alphabet, and unique in the fleet.
    fn check_id(&mut self, id: &str, at: &[Seg], seen: &mut HashSet<String>) {
        let alphabet = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
        if id.is_empty() || !id.chars().all(alphabet) {
            self.error(
                &under(at, "id"),
                format!("server id {id:?} must match [a-zA-Z0-9_.-]+"),
            );
        } else if !seen.insert(id.to_owned()) {
            self.error(&under(at, "id"), format!("duplicate server id {id:?}"));
        }
    }

    /// The server's own tunables over the global ones, checked, and raised
    /// to the floors when an endpoint wrote them.
    fn server_settings(&mut self, s: &ServerFile, global: &TunablesFile, at: &[Seg]) -> Settings {
        // The flattened map holds both tunables and any misspelt key.
        let own: TunablesFile = match yaml_serde::to_value(&s.tunables.0)
            .and_then(yaml_serde::from_value::<TunablesFile>)
        {
            Ok(t) => t,
            Err(e) => {
                let msg = strip_position(&e.to_string());
                let target = match unknown_field_name(&msg) {
                    Some(key) => under(at, &key),
                    None => at.to_vec(),
                };
                self.error(&target, format!("server {:?}: {msg}", s.id));
                TunablesFile::default()
            }
        };
        self.check_tunables(&own, at);
        let mut settings = Settings::resolve(global, &own);
        if matches!(self.trust, Trust::Remote { .. }) {
            self.raise_to_floors(&mut settings, at, &s.id);
        }
        // Contradictions may come from mixing global and per-server values,
        // so the resolved timers are checked against the server's own keys.
        let written = written_keys(&own);
        self.check_timers(&settings, at, &format!("server {:?}: ", s.id), &|k| {
            written.contains(&k)
        });
        settings
    }

    /// Compile a list of conditions; each error at its expression. An
    /// entry an HTTP endpoint wrote may not carry any: an expression is
    /// work mcpmon does, and a remote source has power over nothing but
    /// its own verdict.
    pub(super) fn conditions(
        &mut self,
        list: &[ConditionFile],
        subject: Subject,
        at: &[Seg],
    ) -> Vec<Condition> {
        if list.is_empty() {
            return Vec::new();
        }
        if matches!(self.trust, Trust::Remote { .. }) {
            self.error(
                at,
                "conditions are work mcpmon does on the entry's behalf; an http_sd entry may not carry them"
                    .to_owned(),
            );
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, c) in list.iter().enumerate() {
            let mut here = at.to_vec();
            here.push(Seg::Index(i));
            if !c
                .name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch))
                || c.name.is_empty()
                || c.name.len() > 64
            {
                self.error(
                    &under(&here, "name"),
                    format!("condition name {:?}: 1 to 64 of [A-Za-z0-9_.-]", c.name),
                );
                continue;
            }
            match condition::compile(&c.expr, subject) {
                Ok(expr) => out.push(Condition {
                    name: c.name.clone(),
                    expr,
                    severity: c.severity,
                    subject,
                }),
                Err(e) => self.error(
                    &under(&here, "expr"),
                    format!("condition {:?}: {e}", c.name),
                ),
            }
        }
        out
    }

    /// Condition names are label values of one server: unique within it.
    /// Each repeat is reported where it is written.
    fn unique_condition_names(&mut self, s: &ServerFile, written: &Written, at: &[Seg]) {
        let mut seen = HashSet::new();
        let mut lists = written.conditions();
        lists.push((
            under(at, "health_check_conditions"),
            &s.health_check_conditions,
        ));
        lists.push((under(at, "tools_conditions"), &s.tools_conditions));
        for (path, list) in lists {
            for (j, c) in list.iter().enumerate() {
                if !seen.insert(c.name.as_str()) {
                    let mut here = path.clone();
                    here.push(Seg::Index(j));
                    self.error(
                        &under(&here, "name"),
                        format!("condition name {:?} is used twice in this server", c.name),
                    );
                }
            }
        }
    }

    /// Report each key written that belongs to the other transport.
    fn foreign_keys(&mut self, at: &[Seg], keys: &[(&str, bool)], applies_to: &str) {
        for (name, present) in keys {
            if *present {
                self.error(
                    &under(at, name),
                    format!("`{name}` applies to {applies_to}"),
                );
            }
        }
    }

    /// A stdio server: its command resolved against the config's folder,
    /// arguments and environment expanded.
    fn stdio_transport(&mut self, s: &ServerFile, at: &[Seg]) -> Option<TransportSpec> {
        self.foreign_keys(
            at,
            &[
                ("url", s.url.is_some()),
                ("headers", !s.headers.is_empty()),
                ("bearer_token_env", s.bearer_token_env.is_some()),
                ("oauth2", s.oauth2.is_some()),
                ("tls", s.tls.is_some()),
            ],
            "http servers, not stdio",
        );
        for (i, name) in s.inherit_env.iter().enumerate() {
            let ok =
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                self.error(
                    &item(at, "inherit_env", i),
                    format!("{name:?} is not an environment variable name ([A-Za-z0-9_]+)"),
                );
            }
        }
        let Some(command) = s
            .command
            .as_deref()
            .map(|c| self.expand(c, &under(at, "command")))
        else {
            self.error(at, format!("server {:?}: stdio needs `command`", s.id));
            return None;
        };
        let base = self.base.clone();
        let command = PathBuf::from(command);
        let command = if command.is_relative() && command.components().count() > 1 {
            base.join(command)
        } else {
            command
        };
        let args = s
            .args
            .iter()
            .enumerate()
            .map(|(i, a)| self.expand(a, &item(at, "args", i)))
            .collect();
        let env = self.expand_values(&s.env, &under(at, "env"));
        let cwd = s
            .cwd
            .as_deref()
            .map(|c| base.join(self.expand(c, &under(at, "cwd"))));
        Some(TransportSpec::Stdio {
            command,
            args,
            env,
            inherit_env: s.inherit_env.clone(),
            cwd,
        })
    }

    /// An HTTP server (`sse`: over the legacy HTTP+SSE transport): an
    /// http(s) URL, headers, and at most one source of credentials.
    fn http_transport(&mut self, s: &ServerFile, at: &[Seg], sse: bool) -> Option<TransportSpec> {
        self.foreign_keys(
            at,
            &[
                ("command", s.command.is_some()),
                ("args", !s.args.is_empty()),
                ("env", !s.env.is_empty()),
                ("inherit_env", !s.inherit_env.is_empty()),
                ("cwd", s.cwd.is_some()),
            ],
            if sse {
                "stdio servers, not sse"
            } else {
                "stdio servers, not http"
            },
        );
        let Some(raw) = s.url.as_deref() else {
            let kind = if sse { "sse" } else { "http" };
            self.error(at, format!("server {:?}: {kind} needs `url`", s.id));
            return None;
        };
        let expanded = self.expand(raw, &under(at, "url"));
        let url = match url::Url::parse(&expanded) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            Ok(u) => {
                self.error(
                    &under(at, "url"),
                    format!("url scheme {:?} is not http or https", u.scheme()),
                );
                return None;
            }
            Err(e) => {
                // The raw text may hold an expanded secret: name only the written form.
                self.error(&under(at, "url"), format!("invalid url {raw:?}: {e}"));
                return None;
            }
        };
        if !sse && url.path().trim_end_matches('/').ends_with("/sse") {
            // The legacy HTTP+SSE transport's usual path: its servers answer
            // a Streamable HTTP POST there with 404 or 405.
            self.warn(
                &under(at, "url"),
                format!(
                    "server {:?}: a URL ending in /sse is usually the legacy HTTP+SSE transport (2024-11-05): use `transport: sse`, or the server's Streamable HTTP endpoint (often /mcp)",
                    s.id
                ),
            );
        }
        let headers = self.headers(&s.headers, &under(at, "headers"));
        let bearer_token = s
            .bearer_token_env
            .as_deref()
            .and_then(|var| self.env_secret(var, &under(at, "bearer_token_env")));
        if s.oauth2.is_some() && s.bearer_token_env.is_some() {
            self.error(
                &under(at, "oauth2"),
                "set `oauth2` or `bearer_token_env`, not both".to_owned(),
            );
        }
        let oauth2 = s
            .oauth2
            .as_ref()
            .and_then(|o| self.oauth2(o, &under(at, "oauth2")))
            .map(Box::new);
        if sse && s.oauth2.is_some() {
            self.error(
                &under(at, "oauth2"),
                "`oauth2` is not supported with `transport: sse`; use `bearer_token_env` or `headers`"
                    .to_owned(),
            );
        }
        let tls = s
            .tls
            .as_ref()
            .and_then(|t| self.tls(t, &under(at, "tls")))
            .map(Box::new);
        Some(TransportSpec::Http {
            url,
            sse,
            headers,
            bearer_token,
            oauth2,
            tls,
        })
    }

    /// A `tls:` block: its files readable, a client certificate with its
    /// key, a known least version.
    fn tls(&mut self, t: &super::raw::TlsFile, at: &[Seg]) -> Option<crate::config::TlsSpec> {
        let mut ok = true;
        let mut path = |me: &mut Self, key: &str, value: &Option<String>| -> Option<PathBuf> {
            let v = value.as_ref()?;
            let here = under(at, key);
            if !me.local_only(&here, key) {
                ok = false;
                return None;
            }
            let p = me.base.join(v);
            if let Err(e) = std::fs::read(&p) {
                me.error(&here, format!("cannot read {v:?}: {e}"));
                ok = false;
            }
            Some(p)
        };
        let ca_file = path(self, "ca_file", &t.ca_file);
        let cert_file = path(self, "cert_file", &t.cert_file);
        let key_file = path(self, "key_file", &t.key_file);
        if cert_file.is_some() != key_file.is_some() {
            self.error(at, "`cert_file` and `key_file` go together".to_owned());
            ok = false;
        }
        let min_version = match t.min_version.as_deref() {
            None => None,
            Some("TLS12") => Some(crate::config::TlsVersion::Tls12),
            Some("TLS13") => Some(crate::config::TlsVersion::Tls13),
            Some(other) => {
                self.error(
                    &under(at, "min_version"),
                    format!("min_version {other:?}: TLS12 or TLS13"),
                );
                ok = false;
                None
            }
        };
        if t.insecure_skip_verify {
            self.warn(
                &under(at, "insecure_skip_verify"),
                "insecure_skip_verify: any certificate is accepted, so anyone on the path can answer for this server"
                    .to_owned(),
            );
        }
        ok.then(|| crate::config::TlsSpec {
            ca_file,
            cert_file,
            key_file,
            server_name: t.server_name.clone(),
            insecure_skip_verify: t.insecure_skip_verify,
            min_version,
        })
    }

    /// An `oauth2:` block: the secret from exactly one place, an http(s)
    /// token URL, `${VAR}` expanded everywhere a secret may be written.
    pub(super) fn oauth2(
        &mut self,
        o: &super::raw::OAuth2File,
        at: &[Seg],
    ) -> Option<super::OAuth2Spec> {
        let sub = |name: &str| under(at, name);
        let client_id = self.expand(&o.client_id, &sub("client_id"));
        let client_secret = match (&o.client_secret, &o.client_secret_file) {
            (Some(s), None) => self.expand(s, &sub("client_secret")),
            (None, Some(f)) => {
                if !self.local_only(&sub("client_secret_file"), "client_secret_file") {
                    return None;
                }
                match std::fs::read_to_string(self.base.join(f)) {
                    Ok(s) => s.trim().to_owned(),
                    Err(e) => {
                        self.error(
                            &sub("client_secret_file"),
                            format!("cannot read {f:?}: {e}"),
                        );
                        return None;
                    }
                }
            }
            _ => {
                self.error(
                    at,
                    "set exactly one of `client_secret` and `client_secret_file`".to_owned(),
                );
                return None;
            }
        };
        let raw = self.expand(&o.token_url, &sub("token_url"));
        let token_url = match url::Url::parse(&raw) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            _ => {
                self.error(
                    &sub("token_url"),
                    format!("token_url {:?} is not an http(s) URL", o.token_url),
                );
                return None;
            }
        };
        let endpoint_params = self.expand_values(&o.endpoint_params, &sub("endpoint_params"));
        Some(super::OAuth2Spec {
            client_id,
            client_secret: Secret(client_secret),
            token_url,
            scopes: o.scopes.clone(),
            endpoint_params,
        })
    }
}
