//! Cargo features of this build: `rocksdb` (`state.backend: rocksdb`),
//! `kafka` (Kafka sources and sinks), `s3` (checkpoints, savepoints or
//! sink output on `s3://`), `parquet` (the Parquet sink) and `postgres` (the
//! PostgreSQL sink). What a build without one says when something needs it; the
//! validation of a pipeline's needs is `config::features`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    RocksDb,
    Kafka,
    S3,
    Parquet,
    Postgres,
}

impl Feature {
    pub fn name(self) -> &'static str {
        match self {
            Feature::RocksDb => "rocksdb",
            Feature::Kafka => "kafka",
            Feature::S3 => "s3",
            Feature::Parquet => "parquet",
            Feature::Postgres => "postgres",
        }
    }
}

/// Which optional features a weir binary has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    pub rocksdb: bool,
    pub kafka: bool,
    pub s3: bool,
    pub parquet: bool,
    pub postgres: bool,
}

impl Features {
    /// The features of this build.
    pub const COMPILED: Features = Features {
        rocksdb: cfg!(feature = "rocksdb"),
        kafka: cfg!(feature = "kafka"),
        s3: cfg!(feature = "s3"),
        parquet: cfg!(feature = "parquet"),
        postgres: cfg!(feature = "postgres"),
    };

    pub fn has(self, f: Feature) -> bool {
        match f {
            Feature::RocksDb => self.rocksdb,
            Feature::Kafka => self.kafka,
            Feature::S3 => self.s3,
            Feature::Parquet => self.parquet,
            Feature::Postgres => self.postgres,
        }
    }
}

/// Why something that needs `f` cannot run in this build, and how to get a
/// build that can.
pub fn missing_reason(f: Feature) -> String {
    let name = f.name();
    format!("needs a weir built with the `{name}` feature (cargo build --release --features {name})")
}
