//! The basic-auth header parser on arbitrary Authorization values.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mcpmon::fuzzing::basic_auth(data);
});
