//! The renewal thread (the watchdog): keeps every lock taken without a lease alive.
//!
//! It reads the client's [`Holds`] registry, the same one the acquiring and releasing threads
//! write, so a hold is renewed from the moment its first guard exists until its last guard
//! starts releasing. Holds are renewed `watchdog_timeout / 3` after their last renewal; each
//! round takes every hold due within the next quarter period too, so renewals bunch into few
//! rounds, and renews them with one script call per [`BATCH`] locks, all sent in one round trip
//! (on a Cluster, where a script may not cross slots: one call per slot, in one round trip
//! per master).
//!
//! - Redis says a lock is no longer ours: the hold is marked lost and a warning logged.
//! - Redis cannot be reached: the thread retries every [`RETRY`] and a hold becomes lost once
//!   its last confirmed lease has run out (the holder's `is_lost()` sees that on its own too).
//!
//! With Sentinel, a third thread ([`follow`]) asks the sentinels every second whether the
//! master moved: a master that lost a failover stays writable until Sentinel demotes it, and
//! renewals that kept going there would keep locks alive that the new master does not have.
//!
//! It also runs the subscriber's [errands](Errand), so that no waiter and not the subscriber
//! thread spends a round trip on them: a lock handed to a thread that had stopped waiting is
//! given back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, select};

use crate::client::Core;
use crate::connection::Backend;
use crate::hold::Hold;
use crate::keys::LockKeys;
use crate::scripts::{self, Release, Renewal};
use crate::subscriber::Errand;

/// Locks per renewal script call.
pub(crate) const BATCH: usize = 500;
/// Pause between attempts while Redis cannot be reached.
const RETRY: Duration = Duration::from_millis(250);

/// The thread's body; returns when `stop` is disconnected.
pub(crate) fn run(core: Arc<Core>, stop: Receiver<()>, errands: Receiver<Errand>) {
    let lease = core.watchdog_timeout;
    let period = lease / 3;
    let mut next = Instant::now();
    loop {
        if Instant::now() >= next {
            next = round(&core, lease, period, &stop);
        }
        select! {
            recv(stop) -> _ => return,
            recv(errands) -> errand => match errand {
                Ok(Errand::GiveBack { keys, thread, token }) => give_back(&core, &keys, thread, token),
                Err(_) => {}
            },
            default(next.saturating_duration_since(Instant::now())) => {}
        }
    }
}

/// The Sentinel follower's body: asks the sentinels every [`Backend::follow_interval`]
/// whether the master moved, until `stop` is disconnected.
///
/// Its own thread, not a step of the renewal loop: asking costs up to a connect and a
/// response timeout per sentinel when they do not answer, and renewals of a healthy master
/// must not wait for that (with three stopped sentinels and a 1 s response timeout, a 2 s
/// watchdog lost every lock). Renewal keeps using the master last found meanwhile.
///
/// [`Backend::follow_interval`]: crate::connection::Backend::follow_interval
pub(crate) fn follow(core: Arc<Core>, stop: Receiver<()>, every: Duration) {
    loop {
        if core.backend.follow_master() {
            // Renewals now go to the new master and find there which locks the failover
            // lost; the subscriber reconnects when it sees the change.
            core.subscriber.ring();
        }
        match stop.recv_timeout(every) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// Gives back a lock that a release handed to a thread of ours that had stopped waiting.
/// Only a hand-over nobody took up is given back: the thread may have taken it up with an
/// attempt of its own (same token) and be using it now.
fn give_back(core: &Core, keys: &LockKeys, thread: u64, token: u64) {
    // A thread that took the hand-over from its message holds it without Redis knowing yet:
    // the registry of holds does know.
    if core
        .holds
        .get(&keys.lock, thread)
        .is_some_and(|hold| hold.token == token)
    {
        return;
    }
    let owner = core.owner(thread);
    let freeing = core.backend.freeing();
    // One attempt: the renewal thread must not stall on an errand.
    match core
        .backend
        .run_once_only(|con| scripts::give_back(con, keys, &owner, token, freeing))
    {
        Ok(Release::Released) => {
            log::debug!(
                "gave back lock {:?}, handed to a thread that no longer waited",
                keys.name
            )
        }
        Ok(_) => {}
        Err(e) => log::warn!(
            "could not give back lock {:?}, handed to a thread that no longer waited ({e}); \
             it expires with its lease",
            keys.name
        ),
    }
}

/// Splits `due` into script calls of at most [`BATCH`] locks. On a Cluster, a script may only
/// touch keys of one slot (else CROSSSLOT), so each call renews locks of one slot only: one
/// call per slot that has locks due, whatever the batch size.
fn batches(due: &mut [(u64, Arc<Hold>)], cluster: bool) -> Vec<&[(u64, Arc<Hold>)]> {
    if !cluster {
        return due.chunks(BATCH).collect();
    }
    due.sort_by_key(|(_, hold)| hold.keys.slot());
    due.chunk_by(|(_, a), (_, b)| a.keys.slot() == b.keys.slot())
        .flat_map(|same_slot| same_slot.chunks(BATCH))
        .collect()
}

/// Renews `holds` with `lease`, in as few round trips as the deployment allows (see
/// [`renew_batches`]); `true` where the lock is still ours, in the order given.
pub(crate) fn renew_now(core: &Core, holds: &[&Hold], lease: Duration) -> crate::Result<Vec<bool>> {
    let mut order: Vec<usize> = (0..holds.len()).collect();
    let cluster = core.backend.is_cluster();
    if cluster {
        order.sort_by_key(|&i| holds[i].keys.slot());
    }
    let groups: Vec<&[usize]> = if cluster {
        order
            .chunk_by(|&a, &b| holds[a].keys.slot() == holds[b].keys.slot())
            .collect()
    } else {
        vec![&order[..]]
    };
    let batches: Vec<Vec<Renewal<'_>>> = groups
        .iter()
        .map(|group| group.iter().map(|&i| renewal_of(holds[i])).collect())
        .collect();
    let Renewed { done, failure } = renew_batches(core, &batches, lease, &|| false);
    if let Some(e) = failure {
        return Err(e);
    }
    let mut ours = vec![false; holds.len()];
    for (batch, _, replies) in done {
        for (&i, reply) in groups[batch].iter().zip(replies) {
            ours[i] = reply;
        }
    }
    Ok(ours)
}

fn renewal_of(hold: &Hold) -> Renewal<'_> {
    Renewal {
        keys: &hold.keys,
        owner: &hold.owner,
        token: hold.token,
    }
}

/// Runs the renewal calls of `batches` in few round trips: all of them on one server; on a
/// Cluster, those of each master (by the slot map) together. Of each such group the first
/// call goes alone and the rest follow in one pipeline, so at most two round trips per
/// server; a pipeline the server refused (a slot that moved, a flushed script cache) is run
/// again call by call, each routed and redirected on its own. Stops between round trips once
/// `stopping` says so.
///
/// The lone first call is a probe: a server that does not answer costs the round one call,
/// and its other calls wait for the next round. Without it a stopped master held every round
/// up for minutes and the locks on the other masters expired: one call per slot, each
/// waiting out its timeouts, and a pipeline is no better, since the `redis` crate reads every
/// reply of a pipeline with its own timeout even after the first has timed out.
fn renew_batches(
    core: &Core,
    batches: &[Vec<Renewal<'_>>],
    lease: Duration,
    stopping: &dyn Fn() -> bool,
) -> Renewed {
    let backend = &core.backend;
    let mut renewed = Renewed {
        done: Vec::with_capacity(batches.len()),
        failure: None,
    };
    // Calls one at a time; false once the server does not answer (the rest waits for the
    // next round).
    let one_by_one = |group: &[usize], renewed: &mut Renewed| {
        for &i in group {
            if stopping() {
                break;
            }
            let sent = Instant::now();
            match backend.run(|con| scripts::renew(con, &batches[i], lease)) {
                Ok(replies) => renewed.done.push((i, sent, replies)),
                Err(e) => {
                    let refused = is_refusal(&e);
                    renewed.failure.get_or_insert(e);
                    if !refused {
                        return false;
                    }
                }
            }
        }
        true
    };
    for (node, group) in together(backend, batches) {
        if stopping() {
            break;
        }
        let Some((probe, rest)) = group.split_first() else {
            continue;
        };
        let answered = one_by_one(std::slice::from_ref(probe), &mut renewed);
        if let Some(node) = &node {
            backend.note_answer(node, answered);
        }
        if !answered || rest.is_empty() || stopping() {
            continue;
        }
        let sent = Instant::now();
        let pipelined: Vec<&[Renewal<'_>]> = rest.iter().map(|&i| batches[i].as_slice()).collect();
        // Once only: a refusal is answered below, and a transport failure must not hold the
        // round up with retries (the next round comes soon).
        match backend.run_once_only(|con| scripts::renew_pipelined(con, &pipelined, lease)) {
            Ok(replies) => {
                let replies = rest.iter().zip(replies).map(|(&i, r)| (i, sent, r));
                renewed.done.extend(replies);
            }
            Err(e) if is_refusal(&e) => {
                log::debug!("pipelined renewal refused ({e}); renewing call by call");
                backend.forget_slot_map();
                one_by_one(rest, &mut renewed);
            }
            Err(e) => {
                // Silent after answering its probe: it goes last next round too.
                if let Some(node) = &node {
                    backend.note_answer(node, false);
                }
                renewed.failure.get_or_insert(e);
            }
        }
    }
    renewed
}

/// The server refused the command (it answered with an error), rather than not answering.
fn is_refusal(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Redis(e) if e.code().is_some())
}

/// What [`renew_batches`] did.
struct Renewed {
    /// The batches renewed: index, when the call was sent, Redis's replies.
    done: Vec<(usize, Instant, Vec<bool>)>,
    /// The first failure; the batches not in `done` were not renewed.
    failure: Option<crate::Error>,
}

/// The batches that go together (see [`renew_batches`]), with their master: all of them on
/// one server, those of each master on a Cluster (one each if the slot map cannot be read).
/// Masters that did not answer last time go last, so that the time they cost does not delay
/// the renewals on the others.
fn together(backend: &Backend, batches: &[Vec<Renewal<'_>>]) -> Vec<(Option<String>, Vec<usize>)> {
    if !backend.is_cluster() {
        return vec![(None, (0..batches.len()).collect())];
    }
    // Read again when forgotten; if that fails, the last map read: it is likely still right
    // (CLUSTER SLOTS goes to a node at random, and fails when that one is the stopped master
    // that had the map forgotten), and a call it sends to the wrong master is refused and run
    // again on its own. Without a map, one call per slot, each waiting out its timeouts on a
    // stopped master, would hold the round up until the locks on the others expired.
    let map = match backend.slot_map() {
        Ok(map) => map,
        Err(e) => match backend.last_slot_map() {
            Some(map) => {
                log::debug!("cannot read the slot map again ({e}); grouping by the last one");
                map
            }
            None => {
                log::debug!("cannot read the slot map ({e}); renewing call by call");
                return (0..batches.len()).map(|i| (None, vec![i])).collect();
            }
        },
    };
    let mut by_node: Vec<(Option<String>, Vec<usize>)> = Vec::new();
    for (i, batch) in batches.iter().enumerate() {
        let node = batch.first().and_then(|r| map.node_of(r.keys.slot()));
        match by_node
            .iter_mut()
            .find(|(n, _)| n.is_some() && n.as_deref() == node)
        {
            Some((_, group)) => group.push(i),
            None => by_node.push((node.map(str::to_string), vec![i])),
        }
    }
    by_node.sort_by_key(|(node, _)| node.as_deref().is_some_and(|n| backend.is_silent(n)));
    by_node
}

/// Renews what is due; returns when the next round should start. Checks `stop` between
/// batches, so a closing client waits for one round trip at most.
fn round(core: &Core, lease: Duration, period: Duration, stop: &Receiver<()>) -> Instant {
    let now = Instant::now();
    let horizon = now + period / 4;
    let mut next = now + period;
    let mut due: Vec<(u64, Arc<Hold>)> = Vec::new();
    for (thread, hold) in core.holds.watchdog_holds() {
        if hold.is_lost() {
            continue; // its lease ran out: is_lost() marked and logged it
        }
        let renew_at = hold.renew_at();
        if renew_at <= horizon {
            due.push((thread, hold));
        } else {
            next = next.min(renew_at);
        }
    }
    let batches = batches(&mut due, core.backend.is_cluster());
    let renewals: Vec<Vec<Renewal<'_>>> = batches
        .iter()
        .map(|batch| batch.iter().map(|(_, hold)| renewal_of(hold)).collect())
        .collect();
    let stopping = || !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty));
    let Renewed { done, failure } = renew_batches(core, &renewals, lease, &stopping);
    for (i, sent, still_ours) in done {
        for ((thread, hold), ours) in batches[i].iter().zip(still_ours) {
            if ours {
                hold.renewed(sent, lease, period);
            } else if core.holds.contains(*thread, hold) && hold.mark_lost() {
                // Not registered any more means its owner released it meanwhile.
                log::warn!(
                    "lock {:?} is no longer held by us; marked lost",
                    hold.keys.name
                );
            }
        }
    }
    if let Some(e) = failure {
        log::warn!("lock renewal failed ({e}); retrying in {RETRY:?}");
        next = next.min(Instant::now() + RETRY);
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::{Deployment, SlotMap};

    /// A cluster client whose seed refuses connections: every read of the slot map fails
    /// at once.
    fn unreachable_cluster() -> Backend {
        let settings = crate::connection::Settings {
            pool_size: 1,
            link: crate::link::LinkSettings {
                connect_timeout: Duration::from_millis(200),
                response_timeout: Duration::from_millis(200),
                tls: Default::default(),
            },
        };
        let seeds = vec!["redis://127.0.0.1:1/".to_string()];
        Backend::new(&Deployment::Cluster(seeds), settings).unwrap()
    }

    /// `count` locks whose slots lie in `slots`, one lock per batch.
    fn keys_in(slots: std::ops::RangeInclusive<u16>, count: usize) -> Vec<LockKeys> {
        (0..)
            .map(|i| LockKeys::new("t", &format!("lock-{}-{i}", slots.start())))
            .filter(|keys| slots.contains(&keys.slot()))
            .take(count)
            .collect()
    }

    /// A slot map that cannot be read again (a master stopped, and CLUSTER SLOTS went to it:
    /// the cluster connection sends it to a node at random) must not undo the grouping by
    /// master: one call per slot, each waiting out its timeouts on the stopped master, held
    /// the round up until the locks on the other masters expired.
    #[test]
    fn a_map_that_cannot_be_read_again_still_groups_the_calls_by_master() {
        let backend = unreachable_cluster();
        backend.set_slot_map(SlotMap::new(vec![
            (0, 8191, "10.0.0.1:7000".to_string()),
            (8192, 16383, "10.0.0.2:7000".to_string()),
        ]));
        let mut keys = keys_in(0..=8191, 3);
        keys.extend(keys_in(8192..=16383, 3));
        let batches: Vec<Vec<Renewal<'_>>> = keys
            .iter()
            .map(|keys| {
                vec![Renewal {
                    keys,
                    owner: "o",
                    token: 1,
                }]
            })
            .collect();
        backend.note_answer("10.0.0.1:7000", false);
        assert_eq!(
            together(&backend, &batches).len(),
            2,
            "one group per master"
        );

        // Something said the map is out of date; reading it again fails.
        backend.forget_slot_map();
        let groups = together(&backend, &batches);
        assert_eq!(
            groups,
            [
                (Some("10.0.0.2:7000".to_string()), vec![3, 4, 5]),
                (Some("10.0.0.1:7000".to_string()), vec![0, 1, 2]),
            ],
            "grouped by the last map read, the silent master last"
        );
    }
}
