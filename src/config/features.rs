//! The Cargo features a pipeline needs (`crate::features`). A weir built
//! without one refuses a pipeline that needs it at validation, located,
//! with the command that builds a weir that has it, instead of failing
//! when the job starts.
//!
//! The check is a pure function of what the pipeline needs and the set of
//! features compiled in, so every combination is tested in any build.

pub use crate::features::{missing_reason, Feature, Features};

use super::locate::YPath;

/// One thing a pipeline uses that needs a feature: where it is written and
/// how to name it (`state.backend: rocksdb`).
#[derive(Debug, Clone)]
pub(crate) struct Need {
    pub at: YPath,
    pub what: String,
    pub feature: Feature,
}

/// The needs that `compiled` cannot meet, each with its message.
pub(crate) fn unmet(needs: &[Need], compiled: Features) -> Vec<(&YPath, String)> {
    needs.iter().filter(|n| !compiled.has(n.feature)).map(|n| (&n.at, format!("{} {}", n.what, missing_reason(n.feature)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load::load_with_features;

    const ALL: Features = Features { rocksdb: true, kafka: true, s3: true, parquet: true, postgres: true };
    const NONE: Features = Features { rocksdb: false, kafka: false, s3: false, parquet: false, postgres: false };

    const ROCKS: &str = "name: p
state:
  backend: rocksdb
sources:
  - {name: in, type: datagen, fields: {user: {kind: key, cardinality: 10}}}
sinks:
  - {name: out, type: blackhole, input: in}
";

    const KAFKA: &str = "name: p
sources:
  - name: in
    type: kafka
    brokers: localhost:9092
    topics: [t]
sinks:
  - name: out
    input: in
    type: kafka
    brokers: localhost:9092
    topic: u
    delivery: at_least_once
";

    fn messages(text: &str, features: Features) -> Vec<String> {
        match load_with_features(text, "pipeline.yaml", features) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn rocksdb_backend_without_the_feature_is_refused_at_the_backend() {
        assert_eq!(
            messages(ROCKS, Features { rocksdb: false, kafka: true, s3: true, parquet: true, postgres: true }),
            ["pipeline.yaml:3:12: state.backend: rocksdb needs a weir built with the `rocksdb` feature (cargo build --release --features rocksdb)"]
        );
        assert!(messages(ROCKS, Features { rocksdb: true, kafka: false, s3: true, parquet: true, postgres: true }).is_empty());
    }

    #[test]
    fn kafka_source_and_sink_without_the_feature_are_refused_at_their_type() {
        let got = messages(KAFKA, Features { rocksdb: true, kafka: false, s3: true, parquet: true, postgres: true });
        assert_eq!(
            got,
            [
                "pipeline.yaml:4:11: source `in`: type: kafka needs a weir built with the `kafka` feature (cargo build --release --features kafka)",
                "pipeline.yaml:10:11: sink `out`: type: kafka needs a weir built with the `kafka` feature (cargo build --release --features kafka)",
            ]
        );
        assert!(messages(KAFKA, Features { rocksdb: false, kafka: true, s3: true, parquet: true, postgres: true }).is_empty());
    }

    const S3: &str = "name: p
checkpoint:
  interval: 1s
  storage: s3://bucket/chk
savepoint:
  dir: s3://bucket/sp
sources:
  - {name: in, type: datagen, fields: {user: {kind: key, cardinality: 10}}}
sinks:
  - {name: out, type: blackhole, input: in}
";

    #[test]
    fn storage_on_s3_without_the_feature_is_refused_at_the_url() {
        assert_eq!(
            messages(S3, Features { rocksdb: true, kafka: true, s3: false, parquet: true, postgres: true }),
            [
                "pipeline.yaml:4:12: checkpoint.storage: s3://bucket/chk needs a weir built with the `s3` feature (cargo build --release --features s3)",
                "pipeline.yaml:6:8: savepoint.dir: s3://bucket/sp needs a weir built with the `s3` feature (cargo build --release --features s3)",
            ]
        );
        assert!(messages(S3, Features { rocksdb: false, kafka: false, s3: true, parquet: true, postgres: true }).is_empty());
    }

    const POSTGRES: &str = "name: p
sources:
  - {name: in, type: datagen, fields: {user: {kind: key, cardinality: 10}}}
sinks:
  - name: out
    input: in
    type: postgres
    url: postgres://weir@127.0.0.1:5432/db
    table: t
    columns: {u: user}
    delivery: at_least_once
";

    #[test]
    fn postgres_sink_without_the_feature_is_refused_at_its_type() {
        assert_eq!(
            messages(POSTGRES, Features { postgres: false, ..ALL }),
            ["pipeline.yaml:7:11: sink `out`: type: postgres needs a weir built with the `postgres` feature (cargo build --release --features postgres)"]
        );
        assert!(messages(POSTGRES, Features { postgres: true, ..NONE }).is_empty());
    }

    #[test]
    fn a_pipeline_without_optional_parts_needs_no_feature() {
        let text = ROCKS.replace("state:\n  backend: rocksdb\n", "");
        assert!(messages(&text, NONE).is_empty());
        assert!(messages(ROCKS, ALL).is_empty());
    }
}
