//! The lean ping's JSON and SSE readers on arbitrary response bodies.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mcpmon::fuzzing::lean_ping(data);
});
