//! The config loader on arbitrary text: it must return a config or errors
//! with positions, never panic, whatever the YAML.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        mcpmon::fuzzing::config(text);
    }
});
