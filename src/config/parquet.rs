//! The `parquet` sink's settings (issue 29): a declared schema of typed
//! columns read from field paths, compression, row-group and file sizes,
//! Hive-style partitions by column values and by event time, and what a
//! record that does not fit becomes. Every error is located at its
//! `FILE:LINE:COL`.

use std::collections::HashSet;

use super::locate::{child, item, Seg};
use super::pipeline::OnError;
use super::raw::{RawParquetColumn, RawParquetCompression, RawParquetPartition, RawParquetType, RawTimeBucket, RawTimeUnit};
use super::specs::{field_path, Cx};

/// Rows a row group holds unless `row_group_rows` says otherwise.
pub const DEFAULT_ROW_GROUP_ROWS: u64 = 128 * 1024;
/// The range `row_group_rows` may take.
pub const ROW_GROUP_ROWS: (u64, u64) = (1, 16 << 20);
/// The largest `precision` of a decimal column (what 16 bytes hold).
pub const MAX_DECIMAL_PRECISION: u32 = 38;

#[derive(Debug, Clone)]
pub struct ParquetSinkSpec {
    /// A local directory, or `s3://bucket/prefix`.
    pub path: String,
    pub columns: Vec<ParquetColumn>,
    pub compression: ParquetCompression,
    pub row_group_rows: usize,
    pub max_file_bytes: u64,
    /// Indexes into `columns` of the columns that name directories, in order.
    pub partition_columns: Vec<usize>,
    pub partition_time: Option<TimeBucket>,
    pub on_error: OnError,
    pub storage_options: StorageOptions,
}

impl ParquetSinkSpec {
    /// Whether the files go to object storage.
    pub fn is_remote(&self) -> bool {
        crate::checkpoint::remote::is_url(&self.path)
    }
}

/// object_store options for an S3 path; may hold credentials, so never printed.
#[derive(Clone, Default)]
pub struct StorageOptions(pub Vec<(String, String)>);

impl std::fmt::Debug for StorageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self.0.iter().map(|(k, _)| k.as_str()).collect();
        write!(f, "StorageOptions({keys:?})")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetColumn {
    pub name: String,
    /// The canonical field path the value is read from.
    pub path: String,
    pub kind: ParquetType,
    pub nullable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParquetType {
    Int32,
    Int64,
    Double,
    Utf8,
    Bool,
    /// Days since the Unix epoch.
    Date,
    Timestamp(TimeUnit),
    Decimal {
        precision: u8,
        scale: u8,
    },
}

impl ParquetType {
    /// The name a user writes, for messages.
    pub fn name(self) -> &'static str {
        match self {
            ParquetType::Int32 => "int32",
            ParquetType::Int64 => "int64",
            ParquetType::Double => "double",
            ParquetType::Utf8 => "utf8",
            ParquetType::Bool => "bool",
            ParquetType::Date => "date",
            ParquetType::Timestamp(_) => "timestamp",
            ParquetType::Decimal { .. } => "decimal",
        }
    }

    /// Whether its values may name a partition directory (exact, short text).
    fn partitions(self) -> bool {
        matches!(self, ParquetType::Int32 | ParquetType::Int64 | ParquetType::Utf8 | ParquetType::Bool | ParquetType::Date)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Millis,
    Micros,
    Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParquetCompression {
    Zstd,
    Snappy,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeBucket {
    Day,
    Hour,
}

/// The settings of a `parquet` sink, borrowed from `RawSink::Parquet`.
pub(crate) struct RawParquet<'a> {
    pub path: &'a str,
    pub schema: &'a [RawParquetColumn],
    pub compression: Option<RawParquetCompression>,
    pub row_group_rows: Option<u64>,
    pub max_file_bytes: u64,
    pub partition: Option<&'a RawParquetPartition>,
    pub on_error: OnError,
    pub storage_options: Option<&'a std::collections::BTreeMap<String, String>>,
}

pub(crate) fn spec(cx: &mut Cx, at: &[Seg], raw: RawParquet) -> ParquetSinkSpec {
    cx.not_empty(at, "path", raw.path, "the output directory or `s3://bucket/prefix`");
    let remote = crate::checkpoint::remote::is_url(raw.path);
    if remote {
        if let Err(e) = crate::checkpoint::remote::parse_url(raw.path) {
            cx.err(&child(at, "path"), format!("`{}`: {e}", raw.path));
        }
    } else if raw.storage_options.is_some() {
        cx.err_key(&child(at, "storage_options"), "`storage_options` are for an `s3://` path; this sink writes to a local directory");
    }
    let columns = columns(cx, &child(at, "schema"), raw.schema);
    let row_group_rows = raw.row_group_rows.unwrap_or(DEFAULT_ROW_GROUP_ROWS);
    let (lo, hi) = ROW_GROUP_ROWS;
    if !(lo..=hi).contains(&row_group_rows) {
        cx.err(&child(at, "row_group_rows"), format!("`row_group_rows` must be between {lo} and {hi}, got {row_group_rows}"));
    }
    let (partition_columns, partition_time) = match raw.partition {
        Some(p) => partition(cx, &child(at, "partition"), p, &columns),
        None => (Vec::new(), None),
    };
    ParquetSinkSpec {
        path: raw.path.to_string(),
        columns,
        compression: match raw.compression.unwrap_or(RawParquetCompression::Zstd) {
            RawParquetCompression::Zstd => ParquetCompression::Zstd,
            RawParquetCompression::Snappy => ParquetCompression::Snappy,
            RawParquetCompression::None => ParquetCompression::None,
        },
        row_group_rows: row_group_rows.clamp(lo, hi) as usize,
        max_file_bytes: raw.max_file_bytes,
        partition_columns,
        partition_time,
        on_error: raw.on_error,
        storage_options: StorageOptions(raw.storage_options.cloned().unwrap_or_default().into_iter().collect()),
    }
}

fn columns(cx: &mut Cx, at: &[Seg], schema: &[RawParquetColumn]) -> Vec<ParquetColumn> {
    if schema.is_empty() {
        cx.err(at, "`schema` is empty: expected at least one column, e.g. `- {name: user, type: utf8}`");
    }
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(schema.len());
    for (i, c) in schema.iter().enumerate() {
        let here = item(at, i);
        if c.name.is_empty() {
            cx.err(&child(&here, "name"), "empty column name");
        } else if !names.insert(c.name.as_str()) {
            cx.err(&child(&here, "name"), format!("column `{}` appears twice in `schema`: expected distinct names", c.name));
        }
        let path = match &c.path {
            Some(p) => field_path(cx, &child(&here, "path"), p),
            None => field_path(cx, &child(&here, "name"), &c.name),
        };
        let kind = column_type(cx, &here, c);
        out.push(ParquetColumn { name: c.name.clone(), path, kind, nullable: c.nullable.unwrap_or(true) });
    }
    out
}

fn column_type(cx: &mut Cx, at: &[Seg], c: &RawParquetColumn) -> ParquetType {
    let stray = |cx: &mut Cx, key: &str, given: bool, only: &str| {
        if given {
            cx.err_key(&child(at, key), format!("`{key}` is only for a `{only}` column, and `{}` is `{}`", c.name, type_name(c.kind)));
        }
    };
    if c.kind != RawParquetType::Timestamp {
        stray(cx, "unit", c.unit.is_some(), "timestamp");
    }
    if c.kind != RawParquetType::Decimal {
        stray(cx, "precision", c.precision.is_some(), "decimal");
        stray(cx, "scale", c.scale.is_some(), "decimal");
    }
    match c.kind {
        RawParquetType::Int32 => ParquetType::Int32,
        RawParquetType::Int64 => ParquetType::Int64,
        RawParquetType::Double => ParquetType::Double,
        RawParquetType::Utf8 => ParquetType::Utf8,
        RawParquetType::Bool => ParquetType::Bool,
        RawParquetType::Date => ParquetType::Date,
        RawParquetType::Timestamp => ParquetType::Timestamp(match c.unit.unwrap_or(RawTimeUnit::Ms) {
            RawTimeUnit::Ms => TimeUnit::Millis,
            RawTimeUnit::Us => TimeUnit::Micros,
            RawTimeUnit::Ns => TimeUnit::Nanos,
        }),
        RawParquetType::Decimal => {
            let Some(precision) = c.precision else {
                cx.err(at, format!("decimal column `{}` needs a `precision` (digits in all, 1 to {MAX_DECIMAL_PRECISION})", c.name));
                return ParquetType::Decimal { precision: 1, scale: 0 };
            };
            let scale = c.scale.unwrap_or(0);
            if !(1..=MAX_DECIMAL_PRECISION).contains(&precision) {
                cx.err(&child(at, "precision"), format!("`precision` must be between 1 and {MAX_DECIMAL_PRECISION}, got {precision}"));
            } else if scale > precision {
                cx.err(
                    &child(at, "scale"),
                    format!("`scale` ({scale}) is larger than `precision` ({precision}): expected scale <= precision"),
                );
            }
            let precision = precision.clamp(1, MAX_DECIMAL_PRECISION) as u8;
            ParquetType::Decimal { precision, scale: (scale as u8).min(precision) }
        }
    }
}

fn type_name(t: RawParquetType) -> &'static str {
    match t {
        RawParquetType::Int32 => "int32",
        RawParquetType::Int64 => "int64",
        RawParquetType::Double => "double",
        RawParquetType::Utf8 => "utf8",
        RawParquetType::Bool => "bool",
        RawParquetType::Date => "date",
        RawParquetType::Timestamp => "timestamp",
        RawParquetType::Decimal => "decimal",
    }
}

fn partition(cx: &mut Cx, at: &[Seg], raw: &RawParquetPartition, columns: &[ParquetColumn]) -> (Vec<usize>, Option<TimeBucket>) {
    if raw.columns.is_empty() && raw.event_time.is_none() {
        cx.err(at, "`partition` names no `columns` and no `event_time`: expected e.g. `partition: {columns: [region], event_time: hour}`");
    }
    let mut out = Vec::new();
    for (i, name) in raw.columns.iter().enumerate() {
        let here = item(&child(at, "columns"), i);
        let Some(c) = columns.iter().position(|c| &c.name == name) else {
            let known: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            cx.err(&here, format!("partition column `{name}` is not in `schema`, which has: {}", known.join(", ")));
            continue;
        };
        if out.contains(&c) {
            cx.err(&here, format!("`{name}` appears twice in `partition.columns`"));
        } else if !columns[c].kind.partitions() {
            let kind = columns[c].kind.name();
            cx.err(
                &here,
                format!("partition column `{name}` is a `{kind}`: directories are named by int32, int64, utf8, bool or date columns"),
            );
        }
        out.push(c);
    }
    let time = raw.event_time.map(|b| match b {
        RawTimeBucket::Day => TimeBucket::Day,
        RawTimeBucket::Hour => TimeBucket::Hour,
    });
    (out, time)
}
