//! `filter`: passes the records for which a CEL expression is true,
//! unchanged (raw text, fields, event time and key group), and drops the
//! others. A record the expression fails on (a missing field, a type
//! mismatch, a result that is not a bool) follows `on_error`, always
//! counted in `records_dropped`. Stateless: it is chained into the task of
//! its input (no channel of its own). Its variables are read from the
//! values the source projected for it (`plan::Extras`), its text only where
//! those do not hold them.

use super::{Context, DeadLetter, OpError, OpResult, Operator, OperatorMetrics};
use crate::config::{FilterSpec, OnError};
use crate::expr::{Expression, Slots};
use crate::plan::Layout;
use crate::types::Record;

pub struct Filter {
    name: String,
    condition: Expression,
    /// Per variable: where the input records hold its value.
    slots: Vec<Option<usize>>,
    input: Layout,
    on_error: OnError,
    dead_letter: Option<DeadLetter>,
}

impl Filter {
    /// `input`: where the records it reads hold their values.
    pub fn new(name: &str, spec: &FilterSpec, input: &Layout, dead_letter: Option<DeadLetter>) -> Self {
        let slots = spec.condition.variables().iter().map(|v| input.value(v)).collect();
        let (condition, on_error) = (spec.condition.clone(), spec.on_error.clone());
        Filter { name: name.to_string(), condition, slots, input: input.clone(), on_error, dead_letter }
    }

    pub(crate) fn test(&self, r: &Record) -> Result<bool, String> {
        let slots = Slots { fields: &r.fields, slots: &self.slots, limit: self.input.trusted(&r.fields) };
        self.condition.eval_record(&slots, &r.raw)?.as_bool("`where`")
    }
}

impl Operator for Filter {
    fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        for r in batch {
            match self.test(&r) {
                Ok(true) => out.push(r),
                Ok(false) => {}
                Err(reason) => refuse(&self.name, &self.on_error, self.dead_letter.as_ref(), &r.raw, &reason, ctx.metrics)?,
            }
        }
        Ok(())
    }
}

/// A record operator `name` cannot process: count it, then fail naming the
/// operator and the reason, skip it, or dead-letter it (origin: the operator).
pub(crate) fn refuse(
    name: &str,
    on_error: &OnError,
    dead_letter: Option<&DeadLetter>,
    text: &str,
    reason: &str,
    metrics: &OperatorMetrics,
) -> OpResult {
    let failure = || {
        let shown: String = text.chars().take(200).collect();
        OpError::Data(format!("operator `{name}` failed on a record: {reason}: {shown}"))
    };
    super::dead_letter::drop_bad(on_error, dead_letter, name, text, reason, metrics, failure)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(src: &str, on_error: OnError) -> FilterSpec {
        FilterSpec { condition: Expression::compile(src).unwrap(), on_error }
    }

    #[test]
    fn keeps_true_drops_false_and_refuses_errors() {
        let f = Filter::new("f", &spec("amount > 100 && user.country != 'DE'", OnError::Skip), &Layout::default(), None);
        let rec = |s: &str| Record::new(vec![], s.into(), None);
        assert_eq!(f.test(&rec(r#"{"amount": 150, "user": {"country": "FR"}}"#)), Ok(true));
        assert_eq!(f.test(&rec(r#"{"amount": 150, "user": {"country": "DE"}}"#)), Ok(false));
        assert_eq!(f.test(&rec(r#"{"amount": 50, "user": {"country": "FR"}}"#)), Ok(false));
        assert!(f.test(&rec(r#"{"amount": "x", "user": {"country": "FR"}}"#)).is_err());
        assert!(f.test(&rec(r#"{"user": {"country": "FR"}}"#)).unwrap_err().contains("amount"));
        let g = Filter::new("g", &spec("amount", OnError::Fail), &Layout::default(), None);
        assert!(g.test(&rec(r#"{"amount": 1}"#)).unwrap_err().contains("expected a bool"));
    }
}
