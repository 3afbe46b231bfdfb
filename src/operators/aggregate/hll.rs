//! `approx_count_distinct`: a HyperLogLog sketch of 2^12 registers,
//! written by hand so that its bytes in checkpoints are ours to keep
//! stable (the crates we found either wrap a C++ library or serialize their
//! own internals with a caller's, often randomly seeded, hasher).
//!
//! A value is hashed as its key encoding (`Value::encode_key`: `1` and
//! `1.0` are one value, as for `count_distinct`) with XXH3-64, seed 0, a
//! fixed function: the same value gives the same register in every build,
//! process and parallelism, so sketches merge across restores and rescales.
//! The top 12 bits of the hash pick the register; the register keeps the
//! largest rank (1 + the leading zeros of the other 52 bits, so 1..=53).
//!
//! The payload (the slot's bytes in the accumulator set), version 1:
//! - empty: no value yet;
//! - sparse, `0x01 ++ (u16 LE register ++ u8 rank)*`, registers strictly
//!   increasing, only the non-zero ones: while it is smaller than dense;
//! - dense, `0x02 ++ 4096 register bytes`.
//!
//! The estimate is the classic one (Flajolet et al. 2007), with linear
//! counting below 2.5 m: a standard error of about 1.04 / sqrt(4096) = 1.6 %.
//! Merging is the register-wise maximum, so the result does not depend on
//! arrival order, parallelism or how sessions merged.

use crate::types::Value;

const P: u32 = 12;
const M: usize = 1 << P;
const SPARSE: u8 = 1;
const DENSE: u8 = 2;
/// The largest rank: 64 - P bits, all zero, then the implicit end.
const MAX_RANK: u8 = (64 - P + 1) as u8;
/// Past this many sparse entries the dense form is not larger.
const MAX_SPARSE: usize = M / 3;

/// The register and rank of a value.
fn register_of(v: &Value) -> (usize, u8) {
    let mut key = Vec::with_capacity(16);
    v.encode_key(&mut key);
    let h = xxhash_rust::xxh3::xxh3_64(&key);
    let idx = (h >> (64 - P)) as usize;
    let rest = h << P;
    let rank = (rest.leading_zeros().min(64 - P) + 1) as u8;
    (idx, rank)
}

/// Whether `p` is a sketch payload.
pub fn is_valid(p: &[u8]) -> bool {
    match p.split_first() {
        None => true,
        Some((&DENSE, regs)) => regs.len() == M,
        Some((&SPARSE, entries)) => sparse(entries).is_some(),
        Some(_) => false,
    }
}

/// The (register, rank) entries of a sparse payload's body, if well-formed.
fn sparse(body: &[u8]) -> Option<Vec<(usize, u8)>> {
    if body.len() % 3 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() / 3);
    for e in body.chunks_exact(3) {
        let idx = u16::from_le_bytes([e[0], e[1]]) as usize;
        if idx >= M || !(1..=MAX_RANK).contains(&e[2]) || out.last().is_some_and(|&(prev, _)| prev >= idx) {
            return None;
        }
        out.push((idx, e[2]));
    }
    Some(out)
}

/// The registers of a payload (all zero if it is empty or malformed).
fn registers(p: &[u8]) -> Vec<u8> {
    let mut regs = vec![0u8; M];
    match p.split_first() {
        Some((&DENSE, r)) if r.len() == M => regs.copy_from_slice(r),
        Some((&SPARSE, body)) => {
            for (idx, rank) in sparse(body).unwrap_or_default() {
                regs[idx] = rank;
            }
        }
        _ => {}
    }
    regs
}

/// Append the smaller form of `entries` (sorted, unique registers).
fn write(entries: &[(usize, u8)], out: &mut Vec<u8>) {
    if entries.is_empty() {
        return;
    }
    if entries.len() <= MAX_SPARSE {
        out.push(SPARSE);
        for &(idx, rank) in entries {
            out.extend_from_slice(&(idx as u16).to_le_bytes());
            out.push(rank);
        }
    } else {
        let mut regs = vec![0u8; M];
        for &(idx, rank) in entries {
            regs[idx] = rank;
        }
        out.push(DENSE);
        out.extend_from_slice(&regs);
    }
}

/// Append to `out` the payload `p` with `v` added.
pub fn add(p: &[u8], v: &Value, out: &mut Vec<u8>) {
    let (idx, rank) = register_of(v);
    match p.split_first() {
        Some((&DENSE, r)) if r.len() == M => {
            let at = out.len() + 1;
            out.extend_from_slice(p);
            out[at + idx] = out[at + idx].max(rank);
        }
        _ => {
            let mut entries = p.split_first().and_then(|(_, body)| sparse(body)).unwrap_or_default();
            match entries.binary_search_by_key(&idx, |&(i, _)| i) {
                Ok(i) => entries[i].1 = entries[i].1.max(rank),
                Err(i) => entries.insert(i, (idx, rank)),
            }
            write(&entries, out);
        }
    }
}

/// Append to `out` the union of the sketches `a` and `b`; false if either is malformed.
pub fn merge(a: &[u8], b: &[u8], out: &mut Vec<u8>) -> bool {
    if !is_valid(a) || !is_valid(b) {
        return false;
    }
    let (ra, rb) = (registers(a), registers(b));
    let entries: Vec<(usize, u8)> =
        ra.iter().zip(&rb).enumerate().filter_map(|(i, (&x, &y))| (x.max(y) > 0).then_some((i, x.max(y)))).collect();
    write(&entries, out);
    true
}

/// The estimated number of distinct values added to the sketch `p`.
pub fn estimate(p: &[u8]) -> u64 {
    let regs = registers(p);
    let m = M as f64;
    let zeros = regs.iter().filter(|&&r| r == 0).count();
    if zeros == M {
        return 0;
    }
    let sum: f64 = regs.iter().map(|&r| (-(r.min(MAX_RANK) as i32) as f64).exp2()).sum();
    let alpha = 0.7213 / (1.0 + 1.079 / m);
    let raw = alpha * m * m / sum;
    let e = if raw <= 2.5 * m && zeros > 0 { m * (m / zeros as f64).ln() } else { raw };
    e.round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sketch(values: impl IntoIterator<Item = Value>) -> Vec<u8> {
        let mut p = Vec::new();
        for v in values {
            let mut next = Vec::new();
            add(&p, &v, &mut next);
            p = next;
        }
        p
    }

    #[test]
    fn the_hash_is_fixed() {
        // The registers are part of the checkpoint format: a change of hash
        // would mix two functions in one restored sketch.
        assert_eq!(register_of(&Value::Int(1)), register_of(&Value::Float(1.0)));
        let mut key = Vec::new();
        Value::Str("weir".into()).encode_key(&mut key);
        assert_eq!(xxhash_rust::xxh3::xxh3_64(&key), xxhash_rust::xxh3::xxh3_64_with_seed(&key, 0));
        assert_eq!(sketch([Value::Int(42)]), vec![SPARSE, 0x00, 0x04, 0x03], "the bytes of one value, pinned");
    }

    #[test]
    fn estimates_within_a_few_percent_and_merges_in_any_order() {
        for n in [0u64, 1, 10, 1000, 5000, 20_000, 200_000] {
            let p = sketch((0..n as i64).map(Value::Int));
            let e = estimate(&p) as f64;
            assert!((e - n as f64).abs() <= (n as f64 * 0.05).max(0.5), "{n}: {e}");
            assert!(is_valid(&p));
        }
        let (a, b) = (sketch((0..3000).map(Value::Int)), sketch((2000..9000).map(Value::Int)));
        let (mut ab, mut ba) = (Vec::new(), Vec::new());
        assert!(merge(&a, &b, &mut ab) && merge(&b, &a, &mut ba));
        assert_eq!(ab, ba);
        assert_eq!(ab, sketch((0..9000).map(Value::Int)), "a union is the sketch of all values");
        assert!(!merge(&[3], &a, &mut Vec::new()));
        assert!(!is_valid(&[SPARSE, 0, 0x10, 1]), "register out of range");
        assert!(!is_valid(&[SPARSE, 1, 0, 1, 0, 0, 1]), "registers not increasing");
    }
}
