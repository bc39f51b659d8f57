//! Renewing many holds at once, in as few round trips as the deployment allows: for the
//! watchdog's rounds, and for a composite lock that lines its members' leases up.

use std::time::{Duration, Instant};

use redis::RedisError;

use super::hold::Hold;
use crate::core::Core;
use crate::keys::Family;
use crate::scripts::{self, Renewal};

/// What [`renew`] did, per hold in the order given: when the call that renewed it was sent
/// and whether it is still ours; `None` where it was not renewed (see `failure`).
pub(crate) struct Renewed {
    pub outcome: Vec<Option<(Instant, bool)>>,
    /// The first failure, if any hold was not renewed.
    pub failure: Option<RedisError>,
}

/// Renews `holds` with `lease`: one script call per `core.watchdog_batch_size` holds of one family (on a
/// Cluster, where a script may not cross slots, per slot too), and the calls of each server together: all of them
/// on one server, those of each master on a Cluster. Of each such group the first call goes
/// alone and the rest follow in one pipeline, so at most two round trips per server; a
/// pipeline the server refused (a slot that moved, a flushed script cache) is run again call
/// by call, each routed and redirected on its own. Stops between round trips once `stopping`
/// says so.
///
/// The lone first call is a probe: a server that does not answer costs the round one call
/// (one response timeout), and its other calls wait for the next round. Masters that did
/// not answer last time go last, so that what they cost does not delay the renewals on the
/// others.
pub(crate) fn renew(
    core: &Core,
    holds: &[&Hold],
    lease: Duration,
    stopping: &dyn Fn() -> bool,
) -> Renewed {
    let backend = &core.backend;
    let retention = core.fence_retention;
    let batches: Vec<Vec<usize>> = backend
        .group_by_slot(holds.iter().map(|h| h.keys.slot()))
        .into_iter()
        .flat_map(|group| by_family(group, holds))
        .flat_map(|group| {
            group
                .chunks(core.watchdog_batch_size)
                .map(<[usize]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect();
    let calls: Vec<Vec<Renewal<'_>>> = batches
        .iter()
        .map(|batch| batch.iter().map(|&i| renewal_of(holds[i])).collect())
        .collect();
    let mut renewed = Renewed {
        outcome: vec![None; holds.len()],
        failure: None,
    };
    let mut done = |call: usize, sent: Instant, replies: Vec<bool>| {
        for (&i, ours) in batches[call].iter().zip(replies) {
            renewed.outcome[i] = Some((sent, ours));
        }
    };
    let mut failure: Option<RedisError> = None;
    // Calls one at a time; false once the server does not answer (the rest waits for the
    // next round).
    let one_by_one = |group: &[usize],
                      done: &mut dyn FnMut(usize, Instant, Vec<bool>),
                      failure: &mut Option<RedisError>| {
        for &call in group {
            if stopping() {
                break;
            }
            let sent = Instant::now();
            let renewal = |con: &mut dyn redis::ConnectionLike| {
                scripts::renew(con, core.dialect, &calls[call], lease, retention)
            };
            match backend.run(renewal) {
                Ok(replies) => done(call, sent, replies),
                Err(e) => {
                    let refused = e.code().is_some();
                    failure.get_or_insert(e);
                    if !refused {
                        return false;
                    }
                }
            }
        }
        true
    };
    let first_slots = calls.iter().map(|c| c.first().map_or(0, |r| r.keys.slot()));
    for (node, group) in backend.group_by_master(first_slots) {
        if stopping() {
            break;
        }
        let Some((probe, rest)) = group.split_first() else {
            continue;
        };
        let answered = one_by_one(std::slice::from_ref(probe), &mut done, &mut failure);
        if let Some(node) = &node {
            backend.note_answer(node, answered);
        }
        if !answered || rest.is_empty() || stopping() {
            continue;
        }
        let sent = Instant::now();
        let pipelined: Vec<&[Renewal<'_>]> = rest.iter().map(|&i| calls[i].as_slice()).collect();
        // Once only: a refusal is answered below, and a transport failure must not hold the
        // round up with retries (the next round comes soon).
        match backend.run_once_only(|con| {
            scripts::renew_pipelined(con, core.dialect, &pipelined, lease, retention)
        }) {
            Ok(replies) => {
                for (&call, replies) in rest.iter().zip(replies) {
                    done(call, sent, replies);
                }
            }
            Err(e) if e.code().is_some() => {
                log::debug!("pipelined renewal refused ({e}); renewing call by call");
                backend.forget_slot_map();
                one_by_one(rest, &mut done, &mut failure);
            }
            Err(e) => {
                // Silent after answering its probe: it goes last next round too.
                if let Some(node) = &node {
                    backend.note_answer(node, false);
                }
                failure.get_or_insert(e);
            }
        }
    }
    renewed.failure = failure;
    renewed
}

/// Renews `holds` with `lease` now, all of them or an error; `true` where the object is
/// still ours, in the order given.
pub(crate) fn renew_now(
    core: &Core,
    holds: &[&Hold],
    lease: Duration,
) -> crate::error::Result<Vec<bool>> {
    let Renewed { outcome, failure } = renew(core, holds, lease, &|| false);
    if let Some(e) = failure {
        return Err(e.into());
    }
    Ok(outcome
        .into_iter()
        .map(|o| o.is_some_and(|(_, ours)| ours))
        .collect())
}

/// `group` (indices into `holds`) split by family, in order of first appearance: each
/// family's holds are renewed by its own script.
fn by_family(group: Vec<usize>, holds: &[&Hold]) -> Vec<Vec<usize>> {
    let mut parts: Vec<(Family, Vec<usize>)> = Vec::new();
    for i in group {
        let family = holds[i].keys.family;
        match parts.iter_mut().find(|(f, _)| *f == family) {
            Some((_, part)) => part.push(i),
            None => parts.push((family, vec![i])),
        }
    }
    parts.into_iter().map(|(_, part)| part).collect()
}

fn renewal_of(hold: &Hold) -> Renewal<'_> {
    Renewal {
        keys: &hold.keys,
        owner: &hold.owner,
        token: hold.token,
    }
}
