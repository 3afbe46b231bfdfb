//! Before an instance of a cluster starts (docs/scaling.md): the prefixes
//! it would take over must hold checkpoints of its own cluster shape.

use crate::checkpoint::layout::Layout;
use crate::checkpoint::manifest::{Document, Metadata};
use crate::config::Pipeline;

/// Refuse a prefix whose checkpoints another cluster shape wrote (another
/// N, another pipeline): its key groups and partitions are not this
/// instance's. Reads only, before anything is locked or written.
pub fn check_prefix(p: &Pipeline) -> Result<(), String> {
    let Some(expected) = p.cluster_record() else { return Ok(()) };
    let refuse = |place: String, md: &Metadata| {
        match &md.cluster {
        Some(found) if found.same_shape(&expected) => Ok(()),
        found => Err(format!(
            "{place} was written by {}, and this is {expected} of pipeline `{}`: an instance never takes over the checkpoints of another cluster shape or pipeline (give it its own `state.dir` and `checkpoint.storage`, or restart with the same instances)",
            found.as_ref().map_or_else(|| format!("a single-instance run of pipeline `{}`", md.pipeline), |f| format!("{f} of pipeline `{}`", md.pipeline)),
            p.name
        )),
    }
    };
    let layout = Layout::new(&p.state.dir);
    let ids = crate::checkpoint::disk::list_checkpoint_ids(&layout).map_err(|e| e.to_string())?;
    for id in ids {
        let path = layout.metadata(id);
        // Only complete, readable commit points say who wrote them; the
        // rest is validated (and refused or skipped) by the restore.
        if let Ok(md) = std::fs::read(&path).map_err(|_| ()).and_then(|b| Metadata::from_bytes(&b).map_err(|_| ())) {
            refuse(path.display().to_string(), &md)?;
        }
    }
    if let Some(spec) = p.checkpoint.as_ref().and_then(|c| c.storage.as_ref()) {
        let storage = super::remote::open(spec).map_err(|e| e.to_string())?;
        let stored = crate::checkpoint::publish::checkpoints(&*storage).map_err(|e| e.to_string())?;
        for (id, _) in stored.into_iter().filter(|(_, done)| *done) {
            let key = crate::checkpoint::publish::metadata_key(&id.name());
            if let Ok(md) = storage.get(&key).map_err(|_| ()).and_then(|b| Metadata::from_bytes(&b).map_err(|_| ())) {
                refuse(storage.url(&key), &md)?;
            }
        }
    }
    Ok(())
}
