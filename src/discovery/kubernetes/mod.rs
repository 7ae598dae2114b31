//! A `kubernetes_sd_configs` source: lists, then watches, the objects of
//! one role in its namespaces (kube-runtime's watcher: a watch resumes from
//! the last resourceVersion, a 410 relists, errors back off), and reports
//! the servers they stand for whenever they change.
//!
//! What is kept between events is each object's servers, not the object.
//! An object past [`MAX_OBJECT`] bytes is skipped and counted. An API
//! server that is down or answers nonsense is a failed refresh: the last
//! good list stays, as for every source, and the watch resumes when it
//! answers again. Secrets are never read.

mod roles;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;

use super::{Discover, Document, Mechanism, Task};
use crate::config::clients::Translated;
use crate::config::kubernetes::{KubeSd, Role};
use crate::config::{ConfigError, EntrySource, Format, Rejected, Rejection, Trust};

/// Largest object read (as JSON); larger ones are skipped and counted.
pub const MAX_OBJECT: usize = 256 << 10;
/// Changes arriving together are reported together.
const SETTLE: Duration = Duration::from_millis(200);
/// The longest wait between two attempts to reach the API server.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// What a `kubernetes_sd_configs` entry reads, as RBAC rules: `list` and
/// `watch` on its kind and the kind it joins, if any, in its namespaces
/// (`own` for mcpmon's own, none for all). API discovery (`/apis/GROUP`)
/// is open to every authenticated user; Secrets are never read.
pub fn rbac(sd: &KubeSd) -> Vec<String> {
    let mut namespaces = sd.namespaces.clone();
    if sd.own_namespace {
        namespaces.push("own".to_owned());
    }
    let namespaces = if namespaces.is_empty() {
        "all".to_owned()
    } else {
        namespaces.join(",")
    };
    std::iter::once(sd.role.kind())
        .chain(sd.role.joins())
        .map(|kind| {
            format!(
                "rbac: verbs=list,watch apiGroup={:?} resource={} namespaces={namespaces}",
                kind.group, kind.plural
            )
        })
        .collect()
}

/// A `kubernetes_sd_configs` entry.
#[derive(Debug, PartialEq)]
pub(super) struct Kubernetes(pub(super) KubeSd);

impl Discover for Kubernetes {
    fn mechanism(&self) -> Mechanism {
        Mechanism::Kubernetes
    }

    /// Entries mcpmon wrote from objects: never a process, never
    /// mcpmon's environment.
    fn entry_source<'a>(
        &'a self,
        _origin: &'a Path,
        base: &'a Path,
        own: &'a [SocketAddr],
    ) -> EntrySource<'a> {
        EntrySource {
            trust: Trust::Remote { allow_stdio: false },
            format: Format::Json,
            labels: &self.0.labels,
            base,
            max_servers: self.0.max_servers,
            own_addresses: own,
            relabel: &[],
        }
    }

    /// The task's document: the entries, and the objects skipped.
    fn translate(
        &self,
        origin: &Path,
        text: &str,
        _env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Translated>, ConfigError> {
        let doc: Snapshot = serde_json::from_str(text)
            .map_err(|e| ConfigError::whole_file(origin, format!("not a snapshot: {e}")))?;
        let mut json = String::from("[\n");
        for (i, entry) in doc.servers.iter().enumerate() {
            if i > 0 {
                json.push_str(",\n");
            }
            json.push_str(&entry.to_string());
        }
        json.push_str("\n]");
        let lines = (0..doc.servers.len()).map(|i| i + 2).collect();
        let left_out = (!doc.too_large.is_empty())
            .then(|| Rejected {
                reason: Rejection::TooLarge,
                count: doc.too_large.len(),
                errors: doc
                    .too_large
                    .iter()
                    .take(10)
                    .map(|name| {
                        ConfigError::whole_file(
                            origin,
                            format!("object {name} is over {} KiB, skipped", MAX_OBJECT >> 10),
                        )
                    })
                    .collect(),
            })
            .into_iter()
            .collect();
        Ok(Some(Translated::new(json, lines, left_out)))
    }

    fn run(&self, task: Task) -> BoxFuture<'static, ()> {
        Box::pin(run(self.0.clone(), task))
    }
}

/// What the task reports: every server its objects stand for, and the
/// objects it skipped.
#[derive(serde::Serialize, serde::Deserialize)]
struct Snapshot {
    servers: Vec<Value>,
    too_large: Vec<String>,
}

/// What one object stands for.
enum Seen {
    Servers(Vec<roles::Target>),
    /// The object itself, where its servers depend on others (a role that
    /// joins another kind) or it is one of those others.
    Object(Value),
    TooLarge,
}

/// How a watch's objects are kept: as the servers they stand for, or as
/// themselves (to be read together with the objects they point at).
#[derive(Clone, Copy)]
enum Keep {
    Servers(Role),
    Objects,
}

/// The objects of one watch (one namespace, or all).
#[derive(Default)]
struct Watched {
    objects: HashMap<String, Seen>,
    /// A relist in progress: it replaces `objects` when done.
    relist: Option<HashMap<String, Seen>>,
    /// Listed at least once.
    listed: bool,
}

async fn run(sd: KubeSd, mut task: Task) {
    let origin = PathBuf::from(format!("kubernetes_sd {}", sd.role.as_str()));
    let mut retry = Duration::from_secs(1);
    let apis = loop {
        match connect(&sd).await {
            Ok(apis) => break apis,
            Err(e) => {
                tracing::warn!(role = sd.role.as_str(), error = %e, "kubernetes_sd: cannot reach the API server yet");
                if !fail(&mut task, &origin, e).await {
                    return;
                }
                tokio::select! {
                    _ = task.cancel.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(MAX_RETRY);
            }
        }
    };
    let mut config = watcher::Config::default();
    if let Some(l) = &sd.label_selector {
        config = config.labels(l);
    }
    if let Some(f) = &sd.field_selector {
        config = config.fields(f);
    }
    // The role's own objects first, then those of the kind it joins
    // (unfiltered: a selector picks the role's objects, not what they name).
    let own = apis.own.len();
    let own_keep = match sd.role.joins() {
        Some(_) => Keep::Objects,
        None => Keep::Servers(sd.role),
    };
    let keeps: Vec<Keep> = (0..own)
        .map(|_| own_keep)
        .chain(apis.joined.iter().map(|_| Keep::Objects))
        .collect();
    let streams = apis
        .own
        .into_iter()
        .map(|api| watcher::watcher(api, config.clone()));
    let joined = apis
        .joined
        .into_iter()
        .map(|api| watcher::watcher(api, watcher::Config::default()));
    let streams = streams
        .chain(joined)
        .enumerate()
        .map(|(i, s)| s.default_backoff().map(move |event| (i, event)).boxed());
    let mut events = futures::stream::select_all(streams);
    let mut watched: Vec<Watched> = keeps.iter().map(|_| Watched::default()).collect();
    let mut failing = false;
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        let settle = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = task.cancel.cancelled() => return,
            () = settle => {
                due = None;
                if watched.iter().all(|w| w.listed) {
                    failing = false;
                    let text = snapshot(sd.role, &watched[..own], &watched[own..]);
                    if !task.report(vec![Document { origin: origin.clone(), text: Ok(text) }]).await {
                        return;
                    }
                }
            }
            next = events.next() => {
                let Some((i, event)) = next else { return };
                match event {
                    Ok(event) => {
                        if apply(keeps[i], &mut watched[i], event) {
                            due.get_or_insert_with(|| tokio::time::Instant::now() + SETTLE);
                        }
                    }
                    Err(e) => {
                        // Once per outage: the watcher keeps retrying.
                        if !failing {
                            failing = true;
                            tracing::warn!(role = sd.role.as_str(), error = %e, "kubernetes_sd: watch failed; keeping the last list");
                            if !fail(&mut task, &origin, e.to_string()).await {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Report a failed refresh (the last good list stays); false once nobody
/// listens.
async fn fail(task: &mut Task, origin: &Path, error: String) -> bool {
    let doc = Document {
        origin: origin.to_owned(),
        text: Err(crate::config::defuse(&error, 500)),
    };
    task.report(vec![doc]).await
}

/// Fold one watch event in; true when what is reported may have changed.
fn apply(keep: Keep, watched: &mut Watched, event: Event<DynamicObject>) -> bool {
    match event {
        Event::Init => {
            watched.relist = Some(HashMap::new());
            false
        }
        Event::InitApply(object) => {
            let (key, seen) = read(keep, &object);
            match &mut watched.relist {
                Some(relist) => {
                    relist.insert(key, seen);
                }
                None => {
                    watched.objects.insert(key, seen);
                }
            }
            false
        }
        Event::InitDone => {
            if let Some(relist) = watched.relist.take() {
                watched.objects = relist;
            }
            watched.listed = true;
            true
        }
        Event::Apply(object) => {
            let (key, seen) = read(keep, &object);
            watched.objects.insert(key, seen);
            true
        }
        Event::Delete(object) => {
            watched.objects.remove(&key_of(&object));
            true
        }
    }
}

fn key_of(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.metadata.namespace.as_deref().unwrap_or(""),
        object.metadata.name.as_deref().unwrap_or("")
    )
}

/// One object's servers (or itself), or that it is too large to read.
fn read(keep: Keep, object: &DynamicObject) -> (String, Seen) {
    let key = key_of(object);
    let Ok(value) = serde_json::to_value(object) else {
        return (key, Seen::TooLarge);
    };
    let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
    if size > MAX_OBJECT {
        return (key, Seen::TooLarge);
    }
    match keep {
        Keep::Servers(role) => (key, Seen::Servers(roles::targets(role, &value))),
        Keep::Objects => (key, Seen::Object(value)),
    }
}

/// Every server of the role's watches (`own`), read with the objects of
/// the kind it joins (`joined`), in id order, as the task's document.
fn snapshot(role: Role, own: &[Watched], joined: &[Watched]) -> String {
    let others: roles::Joined = joined
        .iter()
        .flat_map(|w| &w.objects)
        .filter_map(|(key, seen)| match seen {
            Seen::Object(v) => Some((key.clone(), v.clone())),
            _ => None,
        })
        .collect();
    let mut servers: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut too_large = Vec::new();
    for w in own {
        for (key, seen) in &w.objects {
            let targets = match seen {
                Seen::Servers(targets) => targets.clone(),
                Seen::Object(v) => roles::targets_with(role, v, &others),
                Seen::TooLarge => {
                    too_large.push(key.clone());
                    continue;
                }
            };
            for t in targets {
                servers.entry(t.id.clone()).or_default().push(t.entry());
            }
        }
    }
    too_large.sort();
    let doc = Snapshot {
        servers: servers.into_values().flatten().collect(),
        too_large,
    };
    serde_json::to_string(&doc).unwrap_or_default()
}

/// The watches of a source: one per namespace (one for all when none is
/// named) of its role's kind, and as many of the kind it joins, if any.
struct Apis {
    own: Vec<Api<DynamicObject>>,
    joined: Vec<Api<DynamicObject>>,
}

/// A client of the configured API server, and the APIs to watch.
async fn connect(sd: &KubeSd) -> Result<Apis, String> {
    let config = client_config(sd).await?;
    let own = config.default_namespace.clone();
    let client = kube::Client::try_from(config).map_err(|e| format!("client: {e}"))?;
    let mut namespaces = sd.namespaces.clone();
    if sd.own_namespace {
        namespaces.push(own);
    }
    namespaces.sort();
    namespaces.dedup();
    let apis = |resource: ApiResource| -> Vec<Api<DynamicObject>> {
        if namespaces.is_empty() {
            return vec![Api::all_with(client.clone(), &resource)];
        }
        namespaces
            .iter()
            .map(|ns| Api::namespaced_with(client.clone(), ns, &resource))
            .collect()
    };
    let joined = match sd.role.joins() {
        Some(kind) => apis(resource(&client, kind).await?),
        None => Vec::new(),
    };
    Ok(Apis {
        own: apis(resource(&client, sd.role.kind()).await?),
        joined,
    })
}

/// A kind, at the version the API server prefers.
async fn resource(client: &kube::Client, kind: roles::Kind) -> Result<ApiResource, String> {
    if kind.group.is_empty() {
        return Ok(ApiResource::erase::<k8s_openapi::api::core::v1::Service>(
            &(),
        ));
    }
    let group = kube::discovery::group(client, kind.group)
        .await
        .map_err(|e| format!("API group {} is not served: {e}", kind.group))?;
    group
        .recommended_kind(kind.kind)
        .map(|(resource, _)| resource)
        .ok_or_else(|| format!("API group {} serves no kind {}", kind.group, kind.kind))
}

/// Where the API server is and how to authenticate: a kubeconfig, an
/// `api_server` with its certificates and token, or in-cluster.
async fn client_config(sd: &KubeSd) -> Result<kube::Config, String> {
    if let Some(path) = &sd.kubeconfig_file {
        let file = kube::config::Kubeconfig::read_from(path)
            .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
        return kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .map_err(|e| format!("kubeconfig {}: {e}", path.display()));
    }
    let Some(url) = &sd.api_server else {
        return kube::Config::incluster().map_err(|e| format!("in-cluster config: {e}"));
    };
    let uri = url
        .as_str()
        .parse()
        .map_err(|e| format!("api_server {url}: {e}"))?;
    let mut config = kube::Config::new(uri);
    config.accept_invalid_certs = sd.tls.insecure_skip_verify;
    config.root_cert_file = sd.tls.ca_file.clone();
    if let Some(ca) = &sd.tls.ca_file {
        let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
        use rustls_pki_types::pem::PemObject;
        let certs = rustls_pki_types::CertificateDer::pem_slice_iter(&pem)
            .map(|c| c.map(|c| c.to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: {e}", ca.display()))?;
        config.root_cert = Some(certs);
    }
    if let (Some(cert), Some(key)) = (&sd.tls.cert_file, &sd.tls.key_file) {
        config.auth_info.client_certificate = Some(cert.display().to_string());
        config.auth_info.client_key = Some(key.display().to_string());
    }
    if let Some(file) = &sd.bearer_token_file {
        config.auth_info.token_file = Some(file.display().to_string());
    }
    Ok(config)
}
