//! A server's synthetic probes as configured: each kind's key, its shape
//! as written, the spec it becomes, and its checks.
//!
//! A kind is one section of this file: its shapes, one field of
//! `Written` and of [`Probes`], one line in each of their three
//! functions. The server's entry never names a kind: its keys are taken
//! out of the entry's map here, before its tunables are read, and each
//! item is read with its own path, so an error names its own line.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use yaml_serde::Value;

use super::*;
use crate::config::condition::{Condition, Subject};
use crate::config::raw::ConditionFile;

/// A server's synthetic probes, each kind in the order its probes run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Probes {
    /// `tool_probes`: scheduled tool calls.
    pub tools: Vec<ToolProbe>,
    /// `resource_probes`: scheduled resource reads.
    pub resources: Vec<ResourceProbe>,
    /// `prompt_probes`: scheduled prompt gets.
    pub prompts: Vec<PromptProbe>,
}

/// The probes' items as written, read but not yet checked, each with its
/// path.
pub(super) struct Written {
    tools: Vec<(Vec<Seg>, ToolProbeFile)>,
    resources: Vec<(Vec<Seg>, ResourceProbeFile)>,
    prompts: Vec<(Vec<Seg>, PromptProbeFile)>,
}

impl Written {
    /// Every probe's conditions, where they are written: their names share
    /// the server's one namespace.
    pub(super) fn conditions(&self) -> Vec<(Vec<Seg>, &[ConditionFile])> {
        fn of<F>(
            items: &[(Vec<Seg>, F)],
            c: fn(&F) -> &[ConditionFile],
        ) -> impl Iterator<Item = (Vec<Seg>, &[ConditionFile])> {
            items
                .iter()
                .map(move |(at, f)| (under(at, "conditions"), c(f)))
        }
        of(&self.tools, |f| &f.conditions)
            .chain(of(&self.resources, |f| &f.conditions))
            .chain(of(&self.prompts, |f| &f.conditions))
            .collect()
    }
}

impl Validator<'_> {
    /// Take every kind's key out of a server entry's `keys` and read its
    /// items; each unreadable item is reported at its path and left out.
    pub(super) fn written_probes(
        &mut self,
        keys: &mut BTreeMap<String, Value>,
        at: &[Seg],
    ) -> Written {
        Written {
            tools: self.items(keys, "tool_probes", at),
            resources: self.items(keys, "resource_probes", at),
            prompts: self.items(keys, "prompt_probes", at),
        }
    }

    /// The probes as specs, their timeouts defaulting to the server's.
    pub(super) fn probes(&mut self, written: &Written, settings: &Settings) -> Probes {
        Probes {
            tools: (written.tools.iter())
                .map(|(p, f)| self.tool_probe(f, settings, p))
                .collect(),
            resources: (written.resources.iter())
                .map(|(p, f)| self.resource_probe(f, settings, p))
                .collect(),
            prompts: (written.prompts.iter())
                .map(|(p, f)| self.prompt_probe(f, settings, p))
                .collect(),
        }
    }

    /// The items of list `key`, each read on its own.
    fn items<F: DeserializeOwned>(
        &mut self,
        keys: &mut BTreeMap<String, Value>,
        key: &str,
        at: &[Seg],
    ) -> Vec<(Vec<Seg>, F)> {
        let list = match keys.remove(key) {
            None => return Vec::new(),
            Some(Value::Sequence(list)) => list,
            Some(_) => {
                self.error(&under(at, key), format!("`{key}` must be a list"));
                return Vec::new();
            }
        };
        let mut found = Vec::new();
        let mut out = Vec::new();
        for (i, value) in list.into_iter().enumerate() {
            let here = item(at, key, i);
            if let Some(f) = self.part(value, &here, &format!("{key}[{i}]"), &mut found) {
                out.push((here, f));
            }
        }
        self.errors.extend(found);
        out
    }

    /// A probe's interval: above zero, and no shorter than an http_sd
    /// entry may set.
    fn probe_interval(&mut self, what: &str, written: Duration, p: &[Seg]) -> Duration {
        if written.is_zero() {
            let why = format!("{what}: interval must be greater than zero");
            self.error(&under(p, "interval"), why);
        }
        if matches!(self.trust, Trust::Remote { .. }) && written < REMOTE_TOOL_INTERVAL {
            let show = humantime::format_duration(REMOTE_TOOL_INTERVAL);
            let why =
                format!("{what}: interval raised to {show}, the least an http_sd entry may set");
            self.warn(p, why);
            return REMOTE_TOOL_INTERVAL;
        }
        written
    }

    /// A name that becomes a label value and a detail: bounded, printable.
    fn probe_target(&mut self, what: &str, name: &str, p: &[Seg]) -> bool {
        let ok =
            !name.is_empty() && name.len() <= MAX_TARGET && !name.chars().any(char::is_control);
        if !ok {
            let why = format!("{what} {name:?}: 1 to {MAX_TARGET} bytes, no control characters");
            self.error(p, why);
        }
        ok
    }
}

/// Longest tool name, URI or prompt name a probe names: a label value.
const MAX_TARGET: usize = 512;

// ---- tool_probes ----

/// One `tool_probes` item as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolProbeFile {
    tool: String,
    #[serde(default)]
    arguments: serde_json::Map<String, serde_json::Value>,
    interval: Dur,
    request_timeout: Option<Dur>,
    max_request_timeout: Option<Dur>,
    #[serde(default)]
    conditions: Vec<ConditionFile>,
    #[serde(default)]
    task: TaskMode,
}

/// A synthetic tool call made on a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolProbe {
    /// Tool name (a config value, so safe as a label).
    pub tool: String,
    /// Its arguments.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// How often it is called; an overdue call is skipped, never stacked.
    pub interval: Duration,
    /// Deadline without progress; each progress notification resets it.
    pub request_timeout: Duration,
    /// Deadline that progress never extends.
    pub max_request_timeout: Duration,
    /// What its answer must satisfy.
    pub conditions: Vec<Condition>,
    /// Whether it is called as a task.
    pub task: TaskMode,
}

/// Whether a tool probe is called as a task (the 2025-11-25 experimental
/// tasks, or the 2026-07-28 tasks extension), polled to its end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskMode {
    /// When the tool's listing says it supports tasks
    /// (`execution.taskSupport` `optional` or `required`).
    #[default]
    Auto,
    /// Always, whatever the listing says.
    Always,
    /// Only when the tool requires it (`taskSupport: required`).
    Never,
}

impl Validator<'_> {
    /// One `tool_probes` item: its deadlines in order, and not longer
    /// than its interval (or overdue calls are skipped).
    fn tool_probe(&mut self, tp: &ToolProbeFile, settings: &Settings, p: &[Seg]) -> ToolProbe {
        let tool = &tp.tool;
        let what = format!("tool probe {tool:?}");
        let show = |d: Duration| humantime::format_duration(d).to_string();
        let interval = self.probe_interval(&what, tp.interval.0, p);
        let request_timeout = tp.request_timeout.unwrap_or(settings.request_timeout).0;
        let max_request_timeout = (tp.max_request_timeout)
            .unwrap_or(settings.max_request_timeout)
            .0;
        if request_timeout > max_request_timeout {
            let why = format!(
                "{what}: request_timeout ({}) is longer than max_request_timeout ({})",
                show(request_timeout),
                show(max_request_timeout)
            );
            self.error(p, why);
        }
        if max_request_timeout > interval {
            let why = format!(
                "{what}: max_request_timeout ({}) is longer than its interval ({}); overdue calls will be skipped",
                show(max_request_timeout),
                show(interval)
            );
            self.warn(p, why);
        }
        ToolProbe {
            tool: tool.clone(),
            arguments: tp.arguments.clone(),
            interval,
            request_timeout,
            max_request_timeout,
            conditions: self.conditions(
                &tp.conditions,
                Subject::ToolResult,
                &under(p, "conditions"),
            ),
            task: tp.task,
        }
    }
}

// ---- resource_probes ----

/// One `resource_probes` item as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceProbeFile {
    uri: String,
    interval: Dur,
    request_timeout: Option<Dur>,
    #[serde(default)]
    conditions: Vec<ConditionFile>,
}

/// A `resources/read` of a named resource made on a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceProbe {
    /// The resource's URI (a config value, so safe as a label).
    pub uri: String,
    /// How often it is read; an overdue read is skipped, never stacked.
    pub interval: Duration,
    /// The read's deadline.
    pub request_timeout: Duration,
    /// What its contents must satisfy (`result` is the read's result,
    /// `contents` and all).
    pub conditions: Vec<Condition>,
}

impl Validator<'_> {
    /// One `resource_probes` item: a URI with a scheme.
    fn resource_probe(
        &mut self,
        rp: &ResourceProbeFile,
        settings: &Settings,
        p: &[Seg],
    ) -> ResourceProbe {
        let uri = &rp.uri;
        let what = format!("resource probe {uri:?}");
        if self.probe_target("resource probe uri", uri, &under(p, "uri")) && !uri.contains(':') {
            let why = format!("resource probe uri {uri:?} has no scheme (file:///…, https://…)");
            self.error(&under(p, "uri"), why);
        }
        ResourceProbe {
            uri: uri.clone(),
            interval: self.probe_interval(&what, rp.interval.0, p),
            request_timeout: rp.request_timeout.unwrap_or(settings.request_timeout).0,
            conditions: self.conditions(
                &rp.conditions,
                Subject::ToolResult,
                &under(p, "conditions"),
            ),
        }
    }
}

// ---- prompt_probes ----

/// One `prompt_probes` item as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptProbeFile {
    name: String,
    #[serde(default)]
    arguments: BTreeMap<String, String>,
    interval: Dur,
    request_timeout: Option<Dur>,
    #[serde(default)]
    conditions: Vec<ConditionFile>,
}

/// A `prompts/get` of a named prompt made on a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptProbe {
    /// The prompt's name (a config value, so safe as a label).
    pub name: String,
    /// Its arguments: the protocol's are strings.
    pub arguments: BTreeMap<String, String>,
    /// How often it is got; an overdue get is skipped, never stacked.
    pub interval: Duration,
    /// The get's deadline.
    pub request_timeout: Duration,
    /// What its messages must satisfy (`result` is the get's result,
    /// `messages` and all).
    pub conditions: Vec<Condition>,
}

impl Validator<'_> {
    /// One `prompt_probes` item.
    fn prompt_probe(
        &mut self,
        pp: &PromptProbeFile,
        settings: &Settings,
        p: &[Seg],
    ) -> PromptProbe {
        let name = &pp.name;
        self.probe_target("prompt probe name", name, &under(p, "name"));
        PromptProbe {
            name: name.clone(),
            arguments: pp.arguments.clone(),
            interval: self.probe_interval(&format!("prompt probe {name:?}"), pp.interval.0, p),
            request_timeout: pp.request_timeout.unwrap_or(settings.request_timeout).0,
            conditions: self.conditions(
                &pp.conditions,
                Subject::ToolResult,
                &under(p, "conditions"),
            ),
        }
    }
}
