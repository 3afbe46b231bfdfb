//! The target table as the server describes it: each mapped column's SQL
//! type and what JSON it accepts, checked once at start so that a mapping
//! the table cannot take stops the run before any record is written.

use postgres::Client;

use super::row::{Column, ColumnKind};
use super::server::describe;
use super::sql;
use crate::config::{PostgresMode, PostgresSinkSpec};

/// The columns to fill, in the spec's order, and the SQL types their values are cast to.
pub fn columns(client: &mut Client, spec: &PostgresSinkSpec) -> Result<(Vec<Column>, Vec<(String, String)>), String> {
    let target = sql::table(&spec.table);
    let rows = client
        .query(sql::TABLE_COLUMNS, &[&target])
        .map_err(|e| format!("reading the columns of table `{}`: {}", spec.table, describe(&e)))?;
    let found: Vec<(String, String, String, String, String)> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))).collect();
    let key: &[String] = match &spec.mode {
        PostgresMode::Upsert { key } => key,
        PostgresMode::Append => &[],
    };
    let mut columns = Vec::with_capacity(spec.columns.len());
    let mut types = Vec::with_capacity(spec.columns.len());
    for (name, path) in &spec.columns {
        let Some((_, sql_type, typname, category, cast_type)) = found.iter().find(|(n, ..)| n == name) else {
            let have: Vec<&str> = found.iter().map(|(n, ..)| n.as_str()).collect();
            return Err(format!("table `{}` has no column `{name}` (it has: {})", spec.table, have.join(", ")));
        };
        let kind = ColumnKind::of(typname, category)
            .ok_or_else(|| format!("column `{name}` of table `{}` is of type {sql_type}, which the sink cannot fill from JSON (arrays and composite types are not supported; use json or jsonb)", spec.table))?;
        columns.push(Column { name: name.clone(), path: path.clone(), kind, key: key.contains(name) });
        types.push((name.clone(), cast_type.clone()));
    }
    Ok((columns, types))
}
