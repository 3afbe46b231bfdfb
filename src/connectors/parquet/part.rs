//! One Parquet file being written: rows are buffered per column and written
//! as a row group when `row_group_rows` are buffered, and at the end; the
//! file is complete (footer written) only when it is finished.

use std::io::{self, Write};
use std::sync::Arc;

use parquet::basic::{Compression, LogicalType, Repetition, Type as Physical, ZstdLevel};
use parquet::column::writer::ColumnWriter;
use parquet::data_type::{ByteArray, FixedLenByteArray};
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{Type, TypePtr};

use super::cells::Cell;
use crate::config::{ParquetColumn, ParquetCompression, ParquetType, TimeUnit};

/// Where a file's bytes go: a local file, or memory (uploaded when done).
pub enum Out {
    File(io::BufWriter<std::fs::File>),
    Memory(Vec<u8>),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Out::File(f) => f.write(buf),
            Out::Memory(m) => m.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::File(f) => f.flush(),
            Out::Memory(_) => Ok(()),
        }
    }
}

/// The Parquet schema of `columns`.
pub fn schema(columns: &[ParquetColumn]) -> Result<TypePtr, String> {
    let mut fields = Vec::with_capacity(columns.len());
    for c in columns {
        let (physical, logical, length) = match c.kind {
            ParquetType::Int32 => (Physical::INT32, None, None),
            ParquetType::Int64 => (Physical::INT64, None, None),
            ParquetType::Double => (Physical::DOUBLE, None, None),
            ParquetType::Bool => (Physical::BOOLEAN, None, None),
            ParquetType::Utf8 => (Physical::BYTE_ARRAY, Some(LogicalType::String), None),
            ParquetType::Date => (Physical::INT32, Some(LogicalType::Date), None),
            ParquetType::Timestamp(unit) => {
                let unit = match unit {
                    TimeUnit::Millis => parquet::basic::TimeUnit::MILLIS,
                    TimeUnit::Micros => parquet::basic::TimeUnit::MICROS,
                    TimeUnit::Nanos => parquet::basic::TimeUnit::NANOS,
                };
                (Physical::INT64, Some(LogicalType::timestamp(true, unit)), None)
            }
            ParquetType::Decimal { precision, scale } => {
                let logical = Some(LogicalType::decimal(i32::from(scale), i32::from(precision)));
                match precision {
                    1..=9 => (Physical::INT32, logical, None),
                    10..=18 => (Physical::INT64, logical, None),
                    _ => (Physical::FIXED_LEN_BYTE_ARRAY, logical, Some(16)),
                }
            }
        };
        let repetition = if c.nullable { Repetition::OPTIONAL } else { Repetition::REQUIRED };
        let mut b = Type::primitive_type_builder(&c.name, physical).with_repetition(repetition).with_logical_type(logical);
        if let ParquetType::Decimal { precision, scale } = c.kind {
            b = b.with_precision(i32::from(precision)).with_scale(i32::from(scale));
        }
        if let Some(n) = length {
            b = b.with_length(n);
        }
        fields.push(Arc::new(b.build().map_err(|e| format!("column `{}`: {e}", c.name))?));
    }
    let root = Type::group_type_builder("schema").with_fields(fields).build().map_err(|e| e.to_string())?;
    Ok(Arc::new(root))
}

pub fn properties(columns: &[ParquetColumn], compression: ParquetCompression) -> Arc<WriterProperties> {
    let codec = match compression {
        ParquetCompression::Zstd => Compression::ZSTD(ZstdLevel::default()),
        ParquetCompression::Snappy => Compression::SNAPPY,
        ParquetCompression::None => Compression::UNCOMPRESSED,
    };
    let mut props = WriterProperties::builder()
        .set_compression(codec)
        // Version 1 data pages: what every reader (Athena and older Hive included) reads.
        .set_writer_version(WriterVersion::PARQUET_1_0)
        .set_created_by(format!("weir {}", env!("CARGO_PKG_VERSION")));
    // Dictionaries pay where values repeat: strings, dates, small ints.
    // Wide numbers (ids, times, measures) rarely do, and a dictionary that
    // overflows is built for nothing before the writer falls back.
    for c in columns {
        if matches!(c.kind, ParquetType::Int64 | ParquetType::Double | ParquetType::Timestamp(_) | ParquetType::Decimal { .. }) {
            props = props.set_column_dictionary_enabled(parquet::schema::types::ColumnPath::from(c.name.as_str()), false);
        }
    }
    Arc::new(props.build())
}

/// One column's buffered values and definition levels (nullable columns).
struct Column {
    values: Values,
    defs: Option<Vec<i16>>,
    /// Bytes the buffered values take, roughly (for rolling by size).
    bytes: usize,
}

enum Values {
    I32(Vec<i32>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    Bytes(Vec<ByteArray>),
    Wide(Vec<FixedLenByteArray>),
}

impl Column {
    fn new(c: &ParquetColumn) -> Self {
        let values = match c.kind {
            ParquetType::Int32 | ParquetType::Date => Values::I32(Vec::new()),
            ParquetType::Int64 | ParquetType::Timestamp(_) => Values::I64(Vec::new()),
            ParquetType::Double => Values::F64(Vec::new()),
            ParquetType::Bool => Values::Bool(Vec::new()),
            ParquetType::Utf8 => Values::Bytes(Vec::new()),
            ParquetType::Decimal { precision: 1..=9, .. } => Values::I32(Vec::new()),
            ParquetType::Decimal { precision: 10..=18, .. } => Values::I64(Vec::new()),
            ParquetType::Decimal { .. } => Values::Wide(Vec::new()),
        };
        Column { values, defs: c.nullable.then(Vec::new), bytes: 0 }
    }

    /// Append `cell`, already checked for this column by `cells::cell`.
    fn push(&mut self, cell: Cell) {
        if let Some(defs) = &mut self.defs {
            defs.push(i16::from(cell != Cell::Null));
        }
        self.bytes += match (&mut self.values, cell) {
            (_, Cell::Null) => 0,
            (Values::I32(v), Cell::Int32(x)) => {
                v.push(x);
                4
            }
            (Values::I64(v), Cell::Int64(x)) => {
                v.push(x);
                8
            }
            (Values::F64(v), Cell::Double(x)) => {
                v.push(x);
                8
            }
            (Values::Bool(v), Cell::Bool(x)) => {
                v.push(x);
                1
            }
            (Values::Bytes(v), Cell::Bytes(s)) => {
                let n = s.len() + 4;
                v.push(ByteArray::from(s.into_boxed_bytes().into_vec()));
                n
            }
            (Values::Wide(v), Cell::Wide(x)) => {
                v.push(FixedLenByteArray::from(x.to_be_bytes().to_vec()));
                16
            }
            (_, other) => unreachable!("a {other:?} cell checked for another column"),
        };
    }

    fn write(&mut self, w: &mut ColumnWriter<'_>) -> parquet::errors::Result<()> {
        let defs = self.defs.as_deref();
        match (&mut self.values, w) {
            (Values::I32(v), ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(v, defs, None),
            (Values::I64(v), ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(v, defs, None),
            (Values::F64(v), ColumnWriter::DoubleColumnWriter(w)) => w.write_batch(v, defs, None),
            (Values::Bool(v), ColumnWriter::BoolColumnWriter(w)) => w.write_batch(v, defs, None),
            (Values::Bytes(v), ColumnWriter::ByteArrayColumnWriter(w)) => w.write_batch(v, defs, None),
            (Values::Wide(v), ColumnWriter::FixedLenByteArrayColumnWriter(w)) => w.write_batch(v, defs, None),
            _ => unreachable!("column buffers follow the schema"),
        }?;
        self.clear();
        Ok(())
    }

    fn clear(&mut self) {
        match &mut self.values {
            Values::I32(v) => v.clear(),
            Values::I64(v) => v.clear(),
            Values::F64(v) => v.clear(),
            Values::Bool(v) => v.clear(),
            Values::Bytes(v) => v.clear(),
            Values::Wide(v) => v.clear(),
        }
        if let Some(d) = &mut self.defs {
            d.clear();
        }
        self.bytes = 0;
    }
}

/// A Parquet file being written.
pub struct PartWriter {
    file: SerializedFileWriter<Out>,
    columns: Vec<Column>,
    buffered: usize,
    row_group_rows: usize,
    /// Rows in the file, written and buffered.
    pub rows: u64,
}

impl PartWriter {
    pub fn new(
        out: Out,
        spec_columns: &[ParquetColumn],
        schema: TypePtr,
        props: Arc<WriterProperties>,
        row_group_rows: usize,
    ) -> Result<Self, String> {
        let file = SerializedFileWriter::new(out, schema, props).map_err(|e| e.to_string())?;
        let columns = spec_columns.iter().map(Column::new).collect();
        Ok(PartWriter { file, columns, buffered: 0, row_group_rows, rows: 0 })
    }

    /// Append one row (one checked cell per column, in schema order),
    /// leaving `row` empty.
    pub fn push(&mut self, row: &mut Vec<Cell>) -> Result<(), String> {
        for (c, cell) in self.columns.iter_mut().zip(row.drain(..)) {
            c.push(cell);
        }
        self.buffered += 1;
        self.rows += 1;
        if self.buffered >= self.row_group_rows {
            self.flush_row_group()?;
        }
        Ok(())
    }

    /// The file's size so far: written bytes and buffered values.
    pub fn bytes(&self) -> u64 {
        (self.file.bytes_written() + self.columns.iter().map(|c| c.bytes).sum::<usize>()) as u64
    }

    fn flush_row_group(&mut self) -> Result<(), String> {
        if self.buffered == 0 {
            return Ok(());
        }
        let mut group = self.file.next_row_group().map_err(|e| e.to_string())?;
        for c in &mut self.columns {
            let mut w = group.next_column().map_err(|e| e.to_string())?.ok_or("the row group has fewer columns than the schema")?;
            c.write(w.untyped()).map_err(|e| e.to_string())?;
            w.close().map_err(|e| e.to_string())?;
        }
        group.close().map_err(|e| e.to_string())?;
        self.buffered = 0;
        Ok(())
    }

    /// Write what is buffered and the footer; the complete file's bytes go
    /// to the returned output (flushed, not synced).
    pub fn finish(mut self) -> Result<Out, String> {
        self.flush_row_group()?;
        let mut out = self.file.into_inner().map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
        Ok(out)
    }
}
