//! The secret redactor on arbitrary secrets and text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mcpmon::fuzzing::redact(data);
});
