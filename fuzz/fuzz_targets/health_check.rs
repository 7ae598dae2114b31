//! The health_check result reader on arbitrary server output.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mcpmon::fuzzing::health_check(data);
});
