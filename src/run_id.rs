//! Run ids: random, per writer instance, so the names one run creates
//! (Kafka commit-marker groups, part files, dead-letter segments) are never
//! created by another. A checkpoint refers to files and groups by name; if a
//! later run that is then discarded (it crashed before its first checkpoint)
//! could create the same name, a restore of that checkpoint would publish the
//! discarded run's data as its own.

use std::hash::{BuildHasher, Hasher};

/// A fresh 64-bit run id as 16 hex digits.
pub fn draw() -> String {
    format!("{:016x}", draw_u64())
}

/// A fresh 32-bit run id as 8 hex digits, for file names.
pub fn draw_short() -> String {
    format!("{:08x}", draw_u64() as u32)
}

fn draw_u64() -> u64 {
    // RandomState's keys come from the OS's random source; the clock and
    // pid only make two draws in one process differ further.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    h.finish()
}

/// Is `s` a short run id (8 lowercase hex digits)?
pub fn is_short(s: &str) -> bool {
    s.len() == 8 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    #[test]
    fn draws_differ_and_short_ones_are_recognised() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| super::draw_short()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| super::is_short(id)));
        assert_ne!(super::draw(), super::draw());
        assert!(!super::is_short("000001") && !super::is_short("0000000g"));
    }
}
