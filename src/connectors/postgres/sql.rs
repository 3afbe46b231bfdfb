//! The SQL text the sink sends: quoted names, the batch insert, the
//! two-phase-commit statements. Pure, so the exact text is tested.
//!
//! A batch is one statement whatever its size: each column's values go as
//! one `text[]` parameter, `unnest` turns them back into rows and each is
//! cast to its column's type. With upsert, `ON CONFLICT (key) DO UPDATE`
//! sets every other mapped column (`DO NOTHING` when the key is all of
//! them), and a batch keeps only the last row of each key (`DISTINCT ON`
//! the cast key, latest first): one statement may not update a row twice.

/// `name` as a quoted identifier (taken as written: case kept).
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `table` or `schema.table`, quoted.
pub fn table(name: &str) -> String {
    match name.split_once('.') {
        Some((schema, table)) => format!("{}.{}", ident(schema), ident(table)),
        None => ident(name),
    }
}

/// `s` as a string literal.
pub fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The insert of one batch into `target`: `columns` are (name, SQL type),
/// `$1..$n` their `text[]` values; `upsert_key` the conflict target.
pub fn insert(target: &str, columns: &[(String, String)], upsert_key: Option<&[String]>) -> String {
    let names: Vec<String> = columns.iter().map(|(n, _)| ident(n)).collect();
    let casts: Vec<String> = columns.iter().map(|(n, ty)| format!("CAST(u.{} AS {ty})", ident(n))).collect();
    let params: Vec<String> = (1..=columns.len()).map(|i| format!("${i}::text[]")).collect();
    let Some(key) = upsert_key else {
        return format!(
            "INSERT INTO {} ({}) SELECT {} FROM unnest({}) AS u({})",
            table(target),
            names.join(", "),
            casts.join(", "),
            params.join(", "),
            names.join(", ")
        );
    };
    let cast_of = |k: &String| columns.iter().position(|(n, _)| n == k).map(|i| casts[i].clone()).unwrap_or_default();
    let key_casts: Vec<String> = key.iter().map(cast_of).collect();
    let mut sql = format!(
        "INSERT INTO {} ({}) SELECT DISTINCT ON ({}) {} FROM unnest({}) WITH ORDINALITY AS u({}, \"weir ord\") ORDER BY {}, \"weir ord\" DESC",
        table(target),
        names.join(", "),
        key_casts.join(", "),
        casts.join(", "),
        params.join(", "),
        names.join(", "),
        key_casts.join(", ")
    );
    {
        let keys: Vec<String> = key.iter().map(|k| ident(k)).collect();
        let set: Vec<String> =
            columns.iter().filter(|(n, _)| !key.contains(n)).map(|(n, _)| format!("{} = EXCLUDED.{}", ident(n), ident(n))).collect();
        sql += &format!(" ON CONFLICT ({}) ", keys.join(", "));
        sql += &if set.is_empty() { "DO NOTHING".to_string() } else { format!("DO UPDATE SET {}", set.join(", ")) };
    }
    sql
}

/// The columns of `target` with their type (as the server writes it), type
/// name and category, to check the mapping against, and the type without
/// its modifier to cast to: an explicit cast to `varchar(3)` would cut a
/// longer value short, where the insert's own assignment refuses it.
/// `$1`: the quoted name.
pub const TABLE_COLUMNS: &str = "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), t.typname::text, t.typcategory::text, \
     format_type(a.atttypid, NULL) \
     FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
     WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped";

/// The prepared transactions of this database, by gid.
pub const PREPARED: &str = "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()";

pub fn prepare(gid: &str) -> String {
    format!("PREPARE TRANSACTION {}", literal(gid))
}

pub fn commit_prepared(gid: &str) -> String {
    format!("COMMIT PREPARED {}", literal(gid))
}

pub fn rollback_prepared(gid: &str) -> String {
    format!("ROLLBACK PREPARED {}", literal(gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(spec: &[(&str, &str)]) -> Vec<(String, String)> {
        spec.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect()
    }

    #[test]
    fn names_are_quoted_as_written() {
        assert_eq!(ident(r#"We"ird"#), r#""We""ird""#);
        assert_eq!(table("public.Orders"), r#""public"."Orders""#);
        assert_eq!(literal("it's"), "'it''s'");
    }

    #[test]
    fn an_append_batch_is_one_insert_of_unnested_arrays_cast_to_the_column_types() {
        let sql = insert("t", &cols(&[("id", "bigint"), ("at", "timestamp with time zone")]), None);
        assert_eq!(
            sql,
            r#"INSERT INTO "t" ("id", "at") SELECT CAST(u."id" AS bigint), CAST(u."at" AS timestamp with time zone) FROM unnest($1::text[], $2::text[]) AS u("id", "at")"#
        );
    }

    #[test]
    fn an_upsert_sets_every_column_outside_the_key() {
        let key = ["id".to_string()];
        let sql = insert("s.t", &cols(&[("id", "integer"), ("n", "bigint"), ("v", "text")]), Some(&key));
        assert!(sql.ends_with(r#" ON CONFLICT ("id") DO UPDATE SET "n" = EXCLUDED."n", "v" = EXCLUDED."v""#), "{sql}");
        assert!(
            sql.contains(r#"SELECT DISTINCT ON (CAST(u."id" AS integer)) CAST(u."id" AS integer), "#)
                && sql.contains(r#" WITH ORDINALITY AS u("id", "n", "v", "weir ord") ORDER BY CAST(u."id" AS integer), "weir ord" DESC"#),
            "the last row of each key: {sql}"
        );
        let all = ["id".to_string(), "n".to_string()];
        let sql = insert("t", &cols(&[("id", "integer"), ("n", "bigint")]), Some(&all));
        assert!(sql.ends_with(r#" ON CONFLICT ("id", "n") DO NOTHING"#), "{sql}");
    }
}
