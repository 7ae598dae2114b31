//! `mcpmon check-config`: the fleet file and its file sources validated as
//! the service would, every problem printed with its file:line:column.

use std::path::Path;
use std::process::ExitCode;

use mcpmon::config;

/// Read the file_sd files as mcpmon would and print every problem:
/// (servers found, problems).
fn check_file_sd(cfg: &config::Config) -> (usize, usize) {
    let check = mcpmon::discovery::check_files(cfg);
    for e in &check.problems {
        eprintln!("{e}");
    }
    for w in &check.warnings {
        eprintln!("warning: {w}");
    }
    (check.servers, check.problems.len())
}

/// Validate a fleet file and what its file sources hold; 0 when valid.
pub fn run(file: &Path) -> ExitCode {
    match config::load(file) {
        Ok(cfg) => {
            for w in &cfg.warnings {
                eprintln!("warning: {w}");
            }
            let now = chrono::Utc::now();
            print!("{}", config::maintenance::describe(&cfg.maintenance, now));
            // What each Kubernetes source reads, for the RBAC to grant it.
            for sd in &cfg.kubernetes_sd {
                for rule in mcpmon::discovery::rbac(sd) {
                    println!("kubernetes_sd {}: {rule}", sd.role.as_str());
                }
            }
            let (from_files, problems) = check_file_sd(&cfg);
            if problems > 0 {
                return ExitCode::from(1);
            }
            let n = cfg.http_sd.len();
            let endpoints = (n > 0).then(|| format!("; {n} http_sd endpoint(s) not asked"));
            let endpoints = endpoints.unwrap_or_default();
            println!(
                "{}: valid, {} server(s){}{endpoints}",
                file.display(),
                cfg.servers.len(),
                if cfg.file_sd.is_empty() {
                    String::new()
                } else {
                    format!(" and {from_files} from file_sd")
                }
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::from(1)
        }
    }
}
