//! A `client_config_sd_configs` source: the MCP client configs people
//! already keep (Claude Desktop, Cursor, VS Code, …), read and watched as
//! `file_sd_configs` files are, each translated into server entries.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;

use super::file::{local, run};
use super::{Discover, Mechanism, Task};
use crate::config::clients::{ClientFormat, Translated, as_entries};
use crate::config::{ConfigError, EntrySource, FileSd, Format};

/// A `client_config_sd_configs` entry: a file source whose files are
/// client configs of one format.
#[derive(Debug, PartialEq)]
pub(super) struct ClientConfigs {
    /// The files, as a file source's.
    pub(super) sd: FileSd,
    /// How they are written.
    pub(super) format: ClientFormat,
}

impl Discover for ClientConfigs {
    fn mechanism(&self) -> Mechanism {
        Mechanism::ClientConfig
    }

    /// Translated entries arrive as JSON.
    fn entry_source<'a>(
        &'a self,
        origin: &'a Path,
        base: &'a Path,
        own: &'a [SocketAddr],
    ) -> EntrySource<'a> {
        local(&self.sd, Format::Json, origin, base, own)
    }

    fn translate(
        &self,
        origin: &Path,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Translated>, ConfigError> {
        let home = env("HOME").unwrap_or_default();
        as_entries(origin, text, self.format, env, &home).map(Some)
    }

    fn files(&self) -> Option<&[PathBuf]> {
        Some(&self.sd.files)
    }

    fn run(&self, task: Task) -> BoxFuture<'static, ()> {
        Box::pin(run(self.sd.clone(), task))
    }
}
