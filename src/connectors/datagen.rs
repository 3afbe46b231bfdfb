//! The datagen source: seeded synthetic rows, bounded or unbounded.
//!
//! Row n's content is a pure function of (seed, n), and subtask i of p
//! generates rows i, i+p, i+2p, ... So the same pipeline produces the same
//! rows at any parallelism. Such an arithmetic sequence is a lane; the
//! position is the list of a subtask's lanes (next row, step), so a restore
//! at another parallelism deals the lanes out anew, halving lanes when there
//! are fewer than subtasks. A subtask with several lanes merges them by row
//! number, which keeps event time in order. For lateness the split is the
//! whole row sequence: a row's split watermark comes from the rows before it
//! in row order (recomputed, see `highest_time_through`), not from its lane,
//! so which rows are late does not depend on the parallelism.

use crate::codec::{Dec, Enc};
use crate::config::{DatagenSpec, GenField};
use crate::connectors::source::{deal, Extent, RestoredPositions, Source, SourcePoll};
use crate::operators::{OpError, OperatorMetrics};
use crate::types::{check_event_time, Millis, Record, Value};

pub struct Datagen {
    spec: DatagenSpec,
    /// For each projected field, the index of the generated field.
    projection: Vec<usize>,
    /// Index of the generated field that is the event time, if any.
    event_time: Option<usize>,
    subtask: u16,
    parallelism: u16,
    /// (next row, step) of each lane.
    lanes: Vec<(u64, u64)>,
    values: Vec<Value>,
    raw: Vec<u8>,
}

impl Datagen {
    /// `projected` are the fields the pipeline needs, in schema order.
    pub fn new(spec: DatagenSpec, projected: &[String], event_time: Option<&str>, subtask: u16, parallelism: u16) -> Result<Self, String> {
        let index = |name: &str| spec.fields.iter().position(|(n, _)| n == name).ok_or_else(|| format!("datagen has no field `{name}`"));
        let projection = projected.iter().map(|f| index(f)).collect::<Result<_, _>>()?;
        let event_time = event_time.map(index).transpose()?;
        Ok(Datagen {
            values: Vec::with_capacity(spec.fields.len()),
            spec,
            projection,
            event_time,
            subtask,
            parallelism,
            lanes: vec![(subtask as u64, parallelism as u64)],
            raw: Vec::with_capacity(128),
        })
    }

    /// Generate row `n` into `self.values` and `self.raw`.
    fn generate(&mut self, n: u64) {
        self.values.clear();
        self.raw.clear();
        self.raw.push(b'{');
        for (i, (name, field)) in self.spec.fields.iter().enumerate() {
            let r = random(self.spec.seed, n, i as u64);
            let v = match field {
                GenField::Sequence => Value::Int(row_i64(n)),
                GenField::Key { cardinality, prefix } => Value::Str(format!("{prefix}{}", r % cardinality).into()),
                GenField::Int { min, max } => {
                    let span = (*max as i128 - *min as i128 + 1) as u128;
                    Value::Int((*min as i128 + (r as u128 % span) as i128) as i64)
                }
                GenField::Float { min, max } => {
                    let unit = (r >> 11) as f64 / (1u64 << 53) as f64;
                    // Two decimals keep the JSON short and sums readable
                    // (unless scaling by 100 leaves the finite range).
                    let v = min + unit * (max - min);
                    let rounded = (v * 100.0).round() / 100.0;
                    Value::Float(if rounded.is_finite() { rounded } else { v })
                }
                GenField::Timestamp { jitter_ms } => Value::Int(timestamp(&self.spec, n, r, *jitter_ms)),
            };
            if i > 0 {
                self.raw.push(b',');
            }
            let _ = serde_json::to_writer(&mut self.raw, name);
            self.raw.push(b':');
            v.write_json(&mut self.raw);
            self.values.push(v);
        }
        self.raw.push(b'}');
    }
}

/// Row `n`'s timestamp, `r` the row's random value for the field.
/// Saturates far outside the event-time range, which `poll` refuses.
fn timestamp(spec: &DatagenSpec, n: u64, r: u64, jitter_ms: Millis) -> Millis {
    let base = spec.start_time.saturating_add(row_i64(n).saturating_mul(spec.interval_ms));
    let jitter = if jitter_ms > 0 { (r % (jitter_ms as u64).saturating_add(1)) as Millis } else { 0 };
    base.saturating_sub(jitter)
}

/// The highest event time of rows `0..=n`, as far as rows before `n`
/// within `MAX_LOOK_BACK` can reach it. Rows further back than
/// `jitter / interval + 1` are below row `n - 1` anyway, so with a non-zero
/// interval and jitter under `MAX_LOOK_BACK` intervals this is exact. A
/// pure function of `n`: the datagen's split is its row sequence, whatever
/// lanes the subtasks read it in.
fn highest_time_through(spec: &DatagenSpec, field: usize, n: u64) -> Millis {
    let GenField::Timestamp { jitter_ms } = spec.fields[field].1 else { return Millis::MIN };
    let ts = |m: u64| timestamp(spec, m, random(spec.seed, m, field as u64), jitter_ms);
    let back = match spec.interval_ms {
        i if i > 0 => (jitter_ms / i).saturating_add(1).min(MAX_LOOK_BACK),
        _ if jitter_ms == 0 => 1,
        _ => MAX_LOOK_BACK,
    };
    let mut best = ts(n);
    let base = |m: u64| timestamp(spec, m, 0, 0);
    for m in (n.saturating_sub(back as u64)..n).rev() {
        // A row is at most its base time, and bases fall going back: once
        // the base is no higher than the best, no earlier row can beat it.
        if base(m) <= best {
            break;
        }
        best = best.max(ts(m));
    }
    best
}

/// How many rows back a row's split watermark looks (see `highest_time_through`).
const MAX_LOOK_BACK: Millis = 1024;

/// Row `n` as a signed value (rows are at most `i64::MAX` when bounded).
fn row_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A well-mixed 64-bit value for (seed, row, field): splitmix64's finaliser.
fn random(seed: u64, row: u64, field: u64) -> u64 {
    let mut z = seed ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ field.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Source for Datagen {
    fn poll(&mut self, max: usize, out: &mut Vec<Record>, metrics: &OperatorMetrics) -> Result<SourcePoll, OpError> {
        for _ in 0..max {
            let Some(lane) = self.lanes.iter_mut().min_by_key(|(next, _)| *next) else {
                // Restored at a parallelism that dealt this subtask no lane.
                return Ok(SourcePoll::Finished);
            };
            let n = lane.0;
            if self.spec.rows.is_some_and(|rows| n >= rows) {
                return Ok(SourcePoll::Finished);
            }
            lane.0 += lane.1;
            self.generate(n);
            let fields = self.projection.iter().map(|&i| self.values[i].clone()).collect();
            let event_time = match self.event_time.map(|i| &self.values[i]) {
                Some(Value::Int(t)) => Some(check_event_time(*t).map_err(|e| OpError::Data(format!("datagen row {n}: {e}")))?),
                _ => None,
            };
            let raw = String::from_utf8(std::mem::take(&mut self.raw)).expect("generated JSON is UTF-8");
            OperatorMetrics::add(&metrics.bytes_in, raw.len() as u64);
            let mut record = Record::new(fields, raw.into_boxed_str(), event_time);
            if let (Some(_), Some(i)) = (event_time, self.event_time) {
                // The source task turns the split's highest time into its watermark.
                record.split_watermark = highest_time_through(&self.spec, i, n);
            }
            out.push(record);
        }
        Ok(SourcePoll::More)
    }

    fn extent(&self) -> Option<Extent> {
        self.spec.rows.map(|rows| Extent::Rows(self.lanes.iter().map(|(next, step)| rows.saturating_sub(*next).div_ceil(*step)).sum()))
    }

    fn position(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(4 + 16 * self.lanes.len());
        p.put_u32(self.lanes.len() as u32);
        for (next, step) in &self.lanes {
            p.put_u64(*next);
            p.put_u64(*step);
        }
        p
    }

    fn restore(&mut self, restored: &RestoredPositions) -> Result<(), String> {
        let lanes = match restored.own(self.subtask, self.parallelism) {
            Some(own) => decode_lanes(own)?,
            None => {
                let mut all = Vec::new();
                for p in &restored.by_subtask {
                    all.extend(decode_lanes(p)?);
                }
                // Lanes are never lost, only split: a lane (n, s) is the rows
                // n, n+2s, ... and n+s, n+3s, ...
                while all.len() < self.parallelism as usize {
                    let (n, s) = all.remove(0);
                    all.extend([(n, 2 * s), (n + s, 2 * s)]);
                }
                deal(all, self.parallelism, self.subtask)
            }
        };
        self.lanes = lanes;
        Ok(())
    }
}

fn decode_lanes(position: &[u8]) -> Result<Vec<(u64, u64)>, String> {
    let err = |e: crate::codec::DecodeError| format!("datagen position: {e}");
    let mut d = Dec::new(position);
    let n = d.u32("lane count").map_err(err)?;
    let mut lanes = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let (next, step) = (d.u64("next row").map_err(err)?, d.u64("step").map_err(err)?);
        if step == 0 {
            return Err("datagen position: a lane with step 0".into());
        }
        lanes.push((next, step));
    }
    if !d.is_empty() {
        return Err("datagen position: trailing bytes".into());
    }
    Ok(lanes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(rows: u64) -> DatagenSpec {
        DatagenSpec {
            seed: 7,
            rows: Some(rows),
            start_time: 1_000,
            interval_ms: 10,
            fields: vec![
                ("id".into(), GenField::Sequence),
                ("user".into(), GenField::Key { cardinality: 5, prefix: "u".into() }),
                ("amount".into(), GenField::Int { min: -3, max: 3 }),
                ("ts".into(), GenField::Timestamp { jitter_ms: 0 }),
            ],
        }
    }

    fn rows(p: u16) -> Vec<String> {
        let mut all = Vec::new();
        for s in 0..p {
            let mut g = Datagen::new(spec(100), &["user".into()], Some("ts"), s, p).unwrap();
            let mut out = Vec::new();
            while g.poll(8, &mut out, &OperatorMetrics::default()).unwrap() != SourcePoll::Finished {}
            all.extend(out.into_iter().map(|r| r.raw.to_string()));
        }
        all.sort();
        all
    }

    #[test]
    fn same_rows_at_any_parallelism() {
        let one = rows(1);
        assert_eq!(one.len(), 100);
        assert_eq!(rows(3), one);
    }

    /// A row's split watermark comes from the rows before it in row order,
    /// not from the lane that generates it: the same at any parallelism.
    #[test]
    fn split_times_follow_row_order_at_any_parallelism() {
        let mut jittery = spec(300);
        jittery.fields[3].1 = GenField::Timestamp { jitter_ms: 35 };
        let marks = |p: u16| {
            let mut all = Vec::new();
            for s in 0..p {
                let mut g = Datagen::new(jittery.clone(), &["id".into()], Some("ts"), s, p).unwrap();
                let mut out = Vec::new();
                while g.poll(8, &mut out, &OperatorMetrics::default()).unwrap() != SourcePoll::Finished {}
                all.extend(out.into_iter().map(|r| (r.fields[0].clone(), r.event_time.unwrap(), r.split_watermark)));
            }
            all.sort_by_key(|(id, _, _)| id.as_f64().unwrap() as i64);
            all
        };
        let one = marks(1);
        let mut max = Millis::MIN;
        for (_, ts, mark) in &one {
            max = max.max(*ts);
            assert_eq!(*mark, max, "row order's running maximum");
        }
        assert!(one.iter().any(|(_, ts, mark)| ts < mark), "the input has rows behind earlier ones");
        assert_eq!(marks(3), one);
    }

    #[test]
    fn resumes_from_its_position() {
        let mut g = Datagen::new(spec(10), &[], None, 1, 2).unwrap();
        let mut out = Vec::new();
        g.poll(2, &mut out, &OperatorMetrics::default()).unwrap();
        let pos = g.position();
        let mut h = Datagen::new(spec(10), &[], None, 1, 2).unwrap();
        h.restore(&RestoredPositions { parallelism: 2, by_subtask: vec![vec![], pos] }).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        while g.poll(3, &mut a, &OperatorMetrics::default()).unwrap() != SourcePoll::Finished {}
        while h.poll(3, &mut b, &OperatorMetrics::default()).unwrap() != SourcePoll::Finished {}
        assert_eq!(a, b);
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn restore_at_another_parallelism_generates_the_rest_exactly_once() {
        for (old_p, new_p) in [(1, 4), (4, 2), (3, 5), (2, 1)] {
            let mut got = Vec::new();
            let mut positions = Vec::new();
            for s in 0..old_p {
                let mut g = Datagen::new(spec(100), &[], None, s, old_p).unwrap();
                let mut out = Vec::new();
                g.poll(3 + s as usize, &mut out, &OperatorMetrics::default()).unwrap();
                got.extend(out.into_iter().map(|r| r.raw.to_string()));
                positions.push(g.position());
            }
            let restored = RestoredPositions { parallelism: old_p, by_subtask: positions };
            for s in 0..new_p {
                let mut g = Datagen::new(spec(100), &[], Some("ts"), s, new_p).unwrap();
                g.restore(&restored).unwrap();
                let mut out = Vec::new();
                while g.poll(8, &mut out, &OperatorMetrics::default()).unwrap() != SourcePoll::Finished {}
                let times: Vec<_> = out.iter().map(|r| r.event_time).collect();
                assert!(times.is_sorted(), "{old_p} -> {new_p}: merged lanes keep event time in order");
                got.extend(out.into_iter().map(|r| r.raw.to_string()));
            }
            got.sort();
            assert_eq!(got, rows(1), "{old_p} -> {new_p}");
        }
    }

    /// Extreme but valid settings: times clamp at the ends instead of
    /// overflowing, floats stay finite.
    #[test]
    fn extreme_specs_do_not_overflow() {
        let spec = DatagenSpec {
            seed: 1,
            rows: Some(i64::MAX as u64),
            start_time: 253_402_300_799_999,
            interval_ms: 3_155_760_000_000,
            fields: vec![
                ("id".into(), GenField::Sequence),
                ("f".into(), GenField::Float { min: -1e307, max: 1e307 }),
                ("ts".into(), GenField::Timestamp { jitter_ms: Millis::MAX }),
            ],
        };
        // As event time, such a timestamp is refused (outside years 0000 to 9999).
        let mut g = Datagen::new(spec.clone(), &["f".into()], Some("ts"), 0, 1).unwrap();
        g.lanes = vec![(i64::MAX as u64 - 2, 1)];
        let err = g.poll(10, &mut Vec::new(), &OperatorMetrics::default()).unwrap_err().to_string();
        assert!(err.contains("outside the supported range"), "{err}");
        // As a plain field it clamps.
        let mut g = Datagen::new(spec, &["f".into(), "ts".into()], None, 0, 1).unwrap();
        g.lanes = vec![(i64::MAX as u64 - 2, 1)];
        let mut out = Vec::new();
        assert_eq!(g.poll(10, &mut out, &OperatorMetrics::default()).unwrap(), SourcePoll::Finished);
        assert_eq!(out.len(), 2);
        for r in &out {
            assert!(matches!(r.fields[0], Value::Float(f) if f.is_finite()), "{:?}", r.fields);
            assert!(matches!(r.fields[1], Value::Int(_)), "{:?}", r.fields);
        }
    }

    #[test]
    fn values_follow_the_spec() {
        let mut g = Datagen::new(spec(3), &["user".into(), "amount".into()], Some("ts"), 0, 1).unwrap();
        let mut out = Vec::new();
        g.poll(10, &mut out, &OperatorMetrics::default()).unwrap();
        assert_eq!(out.len(), 3);
        for (n, r) in out.iter().enumerate() {
            let v: serde_json::Value = serde_json::from_str(&r.raw).unwrap();
            assert_eq!(v["id"], n as i64);
            assert_eq!(r.event_time, Some(1_000 + 10 * n as i64));
            let a = v["amount"].as_i64().unwrap();
            assert!((-3..=3).contains(&a));
            assert_eq!(r.fields[1], Value::Int(a));
            assert!(v["user"].as_str().unwrap().starts_with('u'));
        }
    }
}
