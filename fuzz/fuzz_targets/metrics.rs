//! The metrics renderer on server-chosen strings, parsed back strictly.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mcpmon::fuzzing::metrics(data);
});
