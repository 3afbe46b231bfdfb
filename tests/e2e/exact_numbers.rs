//! min, max and sum over random multisets of numbers from the edges
//! (mixed-type ties, integers past i64 and i128, long decimals, floats that
//! cancel, -0.0; some rows with an earlier duplicate member of another
//! type), shuffled, at parallelism 1 and 3, against an exact oracle
//! written here from docs/pipeline-reference.md, not from weir's code:
//! - a number's value is its literal's exact decimal value (the generator
//!   writes floats in their shortest form, so a float stands for it);
//! - min/max: by value, then integer < long decimal < float, -0.0 < 0.0;
//! - sum of integers: the exact integer; with any float: the f64 nearest to
//!   the exact sum of the integers and of each other input's f64, found by
//!   writing that dyadic rational out in decimal and letting Rust's
//!   correctly rounded parser round it.

use std::cmp::Ordering;

use num_bigint::BigInt;

use super::rng::Rng;
use super::util::{sink_lines, tmp, weir_run};

/// How weir types a literal (the tie order) and whether it is an integer.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Class {
    Int,
    Decimal,
    Float,
}

/// (literal, class, is an integer)
const POOL: &[(&str, Class, bool)] = &[
    ("0", Class::Int, true),
    ("1", Class::Int, true),
    ("-1", Class::Int, true),
    ("100", Class::Int, true),
    ("9007199254740993", Class::Int, true),
    ("9223372036854775807", Class::Int, true),
    ("-9223372036854775808", Class::Int, true),
    ("9223372036854775808", Class::Decimal, true),
    ("170141183460469231731687303715884105727", Class::Decimal, true),
    ("10000000000000000000000000000000000000000", Class::Decimal, true),
    ("-10000000000000000000000000000000000000000", Class::Decimal, true),
    ("123456789012345678901234567890123456789012345", Class::Decimal, true),
    ("0.10000000000000000001", Class::Decimal, false),
    ("1e2", Class::Float, false),
    ("0.0", Class::Float, false),
    ("-0.0", Class::Float, false),
    ("0.1", Class::Float, false),
    ("0.2", Class::Float, false),
    ("0.3", Class::Float, false),
    ("1.5", Class::Float, false),
    ("-2.25", Class::Float, false),
    ("1e308", Class::Float, false),
    ("-1e308", Class::Float, false),
    ("9007199254740992.0", Class::Float, false),
    ("1e-300", Class::Float, false),
];

/// An exact decimal: digits × 10^exp.
fn decimal(text: &str) -> (BigInt, i64) {
    let (mant, exp) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i64>().unwrap()),
        None => (text, 0),
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let digits: BigInt = format!("{int}{frac}").parse().unwrap();
    (digits, exp - frac.len() as i64)
}

fn cmp_decimal(a: &str, b: &str) -> Ordering {
    let ((da, ea), (db, eb)) = (decimal(a), decimal(b));
    let e = ea.min(eb);
    let scale = |d: BigInt, x: i64| d * BigInt::from(10u8).pow((x - e) as u32);
    scale(da, ea).cmp(&scale(db, eb))
}

/// The documented total order.
fn total(a: &(&str, Class, bool), b: &(&str, Class, bool)) -> Ordering {
    cmp_decimal(a.0, b.0).then(a.1.cmp(&b.1)).then_with(|| (!a.0.starts_with('-')).cmp(&!b.0.starts_with('-')))
}

/// The exact sum × 2^1074 of integers and of the f64s of the other inputs.
fn scaled_sum(values: &[&(&str, Class, bool)]) -> BigInt {
    let mut sum = BigInt::from(0);
    for (text, _, integer) in values {
        if *integer {
            sum += decimal(text).0 * BigInt::from(10u8).pow(decimal(text).1 as u32) << 1074usize;
            continue;
        }
        let x: f64 = text.parse().unwrap();
        let bits = x.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as i64;
        let frac = (bits & ((1 << 52) - 1)) as i64;
        let (m, e) = if exp == 0 { (frac, -1074) } else { (frac | (1 << 52), exp - 1075) };
        let m = if x.is_sign_negative() { -m } else { m };
        sum += BigInt::from(m) << (e + 1074) as usize;
    }
    sum
}

/// The f64 nearest to n / 2^1074 (Rust's parser rounds correctly).
fn nearest_f64(n: &BigInt) -> f64 {
    let digits = n * BigInt::from(5u8).pow(1074);
    format!("{digits}e-1074").parse().unwrap()
}

#[test]
fn min_max_and_sum_match_an_exact_oracle_in_any_order_and_parallelism() {
    let mut rng = Rng::from_env("exact numbers");
    let keys = 16;
    let groups: Vec<Vec<&(&str, Class, bool)>> = (0..keys).map(|_| (0..rng.range(1, 8)).map(|_| rng.pick(POOL)).collect()).collect();
    // Some rows carry an earlier duplicate `v` (of any type): the last counts.
    let decoys = ["[1]", r#"{"a":1}"#, r#""x""#, "null", "5", "1e308"];
    let mut rows: Vec<String> = Vec::new();
    for (k, vs) in groups.iter().enumerate() {
        for (text, _, _) in vs {
            rows.push(match rng.chance(0.3) {
                true => format!(r#"{{"v":{},"k":"k{k}","v":{text}}}"#, rng.pick(&decoys)),
                false => format!(r#"{{"k":"k{k}","v":{text}}}"#),
            });
        }
    }
    for p in [1, 3] {
        // A new order each run.
        for i in (1..rows.len()).rev() {
            rows.swap(i, rng.range(0, i as u64) as usize);
        }
        let dir = tmp();
        let input = dir.path().join("in.jsonl");
        std::fs::write(&input, rows.join("\n") + "\n").unwrap();
        let pipeline = dir.path().join("p.yaml");
        std::fs::write(
            &pipeline,
            format!(
                "name: exact\nstate: {{dir: {}}}\nsources:\n  - {{name: in, type: file, path: {}}}\noperators:\n  - {{name: agg, type: aggregate, input: in, key: [k], aggregates: [{{fn: min, field: v, as: lo}}, {{fn: max, field: v, as: hi}}, {{fn: sum, field: v, as: s}}]}}\nsinks:\n  - {{name: out, type: file, input: agg, path: {}}}\n",
                dir.path().join("st").display(),
                input.display(),
                dir.path().join("out").display()
            ),
        )
        .unwrap();
        weir_run(pipeline.to_str().unwrap(), p).ok();
        let out = sink_lines(&dir.path().join("out"));
        for (k, values) in groups.iter().enumerate() {
            let line =
                out.iter().rev().find(|l| l.starts_with(&format!(r#"{{"k":"k{k}","#))).unwrap_or_else(|| panic!("no result for k{k}"));
            // The numbers as written (a JSON parser would round them).
            let field = |name: &str| {
                let from = line.find(&format!(r#""{name}":"#)).unwrap() + name.len() + 3;
                let rest = &line[from..];
                rest[..rest.find([',', '}']).unwrap()].to_string()
            };
            let want_lo = values.iter().min_by(|a, b| total(a, b)).unwrap();
            let want_hi = values.iter().max_by(|a, b| total(a, b)).unwrap();
            let what = format!("k{k} = {:?} at -p {p}: {line}", values.iter().map(|v| v.0).collect::<Vec<_>>());
            for (got, want) in [(field("lo"), want_lo), (field("hi"), want_hi)] {
                assert_eq!(cmp_decimal(&got, want.0), Ordering::Equal, "value, {what}");
                // Floats print with a fraction or a signed exponent, integers
                // as digits alone (long decimals either way).
                let float_text = got.contains('.') || got.contains("e+") || got.contains("e-");
                match want.1 {
                    Class::Float => assert!(float_text, "a float, {what}"),
                    Class::Int => assert!(!float_text && !got.contains('e'), "an integer, {what}"),
                    Class::Decimal => {}
                }
                assert_eq!(got.starts_with('-'), want.0.starts_with('-'), "sign, {what}");
            }
            let sum = scaled_sum(values);
            let s = field("s");
            if values.iter().all(|v| v.2) {
                let (d, e) = decimal(&s);
                assert!(e >= 0 && !s.contains("e+"), "an integer sum, {what}");
                assert_eq!(d * BigInt::from(10u8).pow(e as u32) << 1074usize, sum, "sum, {what}");
            } else {
                let got: f64 = s.trim_matches('"').replace("Infinity", "inf").parse().unwrap();
                assert_eq!(got, nearest_f64(&sum), "sum, {what}");
            }
        }
    }
}
