//! The thread's bookkeeping, fed the frames a Redis 7.0 node sends. No Redis is involved:
//! the one socket goes to a local listener that is never read, and the frames are handed
//! to the task as `serve` would hand them.
use super::routes::{Routing, split_host_port};
use super::*;
use crate::backend::{Deployment, Settings, SlotMap};
use crate::keys::LockKeys;
use crate::subscriber::{Subscriber, SubscriberTask, Wake};
use redis::ConnectionAddr;
use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;

/// A subscriber of our layout on `deployment`, and its polled task, routing by slots (as once
/// `check` found SPUBLISH); `response_timeout` for its connections.
fn routed_by_slots(
    deployment: &Deployment,
    response_timeout: Duration,
) -> (Subscriber, PolledTask) {
    let settings = Settings {
        pool_size: 1,
        link: crate::backend::link::LinkSettings {
            connect_timeout: Duration::from_millis(10),
            response_timeout,
            tls: Default::default(),
            name: None,
        },
    };
    let backend = Arc::new(Backend::new(deployment, settings).unwrap());
    let (errands, _) = crossbeam_channel::unbounded();
    let (sub, SubscriberTask(mut task)) = Subscriber::new(
        backend,
        "p",
        "c0ffee",
        crate::scripts::dialect(crate::Layout::Redlatch),
        errands,
        Default::default(),
    )
    .unwrap();
    task.routes.routing = Routing::Slots;
    (sub, task)
}

/// A subscriber and its polled task, routing by slots, every slot on `node`.
fn task() -> (Subscriber, PolledTask, std::net::TcpListener, String) {
    let deployment = Deployment::Url("redis://127.0.0.1:1/".into());
    let (sub, mut task) = routed_by_slots(&deployment, Duration::from_secs(10));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let node = listener.local_addr().unwrap().to_string();
    task.routes.slots = Some(Arc::new(SlotMap::new(vec![(0, 16383, node.clone())])));
    task.routes.stale = false; // the map above is the one read
    (sub, task, listener, node)
}

/// Plain TCP to `addresses`, in turn.
fn tcp(addresses: &[SocketAddr]) -> Dial {
    Dial::Tcp {
        untried: VecDeque::from(addresses.to_vec()),
        tls: None,
    }
}

/// The owner id of thread `thread` of this test's client.
fn owner(thread: u64) -> Arc<str> {
    format!("c0ffee:{thread}").into()
}

fn bulk(s: &str) -> Frame {
    Frame::Bulk(Some(s.as_bytes().to_vec()))
}

fn push(kind: &str, channel: &str) -> Frame {
    Frame::Array(Some(vec![bulk(kind), bulk(channel), Frame::Integer(1)]))
}

/// The answers a node gives to one (S)SUBSCRIBE or (S)UNSUBSCRIBE of a lock: its grant
/// channel's, then its channel's.
fn answers(kind: &str, keys: &LockKeys) -> [Frame; 2] {
    [push(kind, &grant(keys)), push(kind, keys.channel())]
}

/// Lock `keys`'s grant channel for this test's client.
fn grant(keys: &LockKeys) -> String {
    keys.grant_channel("c0ffee").unwrap()
}

/// What a subscription of lock `keys` names: its grant channel, then its channel.
fn both(keys: &LockKeys) -> VecDeque<String> {
    VecDeque::from([grant(keys), keys.channel().to_string()])
}

fn confirmed(sub: &Subscriber, keys: &LockKeys) -> bool {
    sub.shared.entries.lock()[keys.channel()]
        .state
        .lock()
        .confirmed
}

/// The frames a node sends for a message on `channel`.
fn message_bytes(channel: &str, payload: &[u8]) -> Vec<u8> {
    let mut m = format!(
        "*3\r\n$8\r\nsmessage\r\n${}\r\n{channel}\r\n${}\r\n",
        channel.len(),
        payload.len()
    )
    .into_bytes();
    m.extend_from_slice(payload);
    m.extend_from_slice(b"\r\n");
    m
}

/// Anyone may PUBLISH on our channels: a message too big to keep, followed in the same
/// read by a grant, costs the grant nothing and the connection is kept.
#[test]
fn a_message_too_big_to_keep_is_skipped_and_the_grant_behind_it_delivered() {
    let (sub, mut task, listener, _node) = task();
    let keys = Arc::new(LockKeys::new("p", "x"));
    let waiter = sub.join(sub.expect(&keys, &owner(1)));
    task.reconcile(Instant::now());
    let (mut node, _) = listener.accept().unwrap();
    let mut bytes = b"+PONG\r\n".to_vec();
    for channel in both(&keys) {
        bytes.extend(
            format!(
                "*3\r\n$10\r\nssubscribe\r\n${}\r\n{channel}\r\n:1\r\n",
                channel.len(),
            )
            .as_bytes(),
        );
    }
    bytes.extend(message_bytes(&grant(&keys), &vec![b'x'; 3 << 20]));
    bytes.extend(message_bytes(
        &grant(&keys),
        &crate::scripts::Message::grant(Duration::from_secs(30), &[(9, "c0ffee:1")]),
    ));
    let writer = std::thread::spawn(move || node.write_all(&bytes).map(|_| node));

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut woken = Vec::new();
    while !woken.contains(&Wake::HandedOver { token: 9 }) && Instant::now() < deadline {
        if !task.shards.is_empty()
            && let Err(e) = task.serve(0)
        {
            task.fail(0, &e); // as `run` does
        }
        match waiter.wait(Duration::from_millis(5)) {
            Wake::Timeout => {}
            wake => woken.push(wake),
        }
    }
    let _node = writer.join().unwrap();
    assert_eq!(woken.last(), Some(&Wake::HandedOver { token: 9 }));
    assert_eq!(task.shards.len(), 1, "the connection was given up");
    assert!(confirmed(&sub, &keys));
}

/// Where a name resolves to an address nobody listens on first (`localhost` as `::1`,
/// the server on 127.0.0.1 only), the connection goes on to the next address. This
/// machine resolves `localhost` to 127.0.0.1 alone, so the list is made by hand.
#[test]
fn a_connection_refused_at_one_address_goes_on_to_the_next() {
    let (_sub, mut task, listener, _node) = task();
    let refusing = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap(); // closed again: connections to it are refused
    let good = listener.local_addr().unwrap();
    let i = task
        .open_dial("node", tcp(&[refusing, good]), Instant::now())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !task.shards[i].established && Instant::now() < deadline {
        if let Err(e) = task.serve(i) {
            panic!("the connection failed: {e}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(task.shards[i].established);
    assert_eq!(task.shards[i].stream.peer_addr().unwrap(), good);
    assert_eq!(
        task.shards[i].sent.len(),
        1,
        "the first command still waits"
    );
}

/// An address that does not complete the handshake within the connect timeout is given
/// up for the next one; the last one's failure fails the connection.
#[test]
fn an_address_silent_past_the_connect_timeout_is_given_up_for_the_next() {
    let (_sub, mut task, listener, _node) = task();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (first, second) = (listener.local_addr().unwrap(), other.local_addr().unwrap());
    task.open_dial("node", tcp(&[first, second]), Instant::now())
        .unwrap();
    // As if the handshake with the first had not completed in time (the test's connect
    // timeout is 10 ms).
    task.reconcile(Instant::now() + Duration::from_millis(20));
    assert_eq!(task.shards.len(), 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !task.shards[0].established && Instant::now() < deadline {
        task.serve(0).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(task.shards[0].stream.peer_addr().unwrap(), second);
}

/// A channel too long to read back is never subscribed, and the channels beside it are.
#[test]
fn a_channel_too_long_to_read_back_is_not_subscribed_and_costs_the_others_nothing() {
    let (sub, mut task, _listener, _node) = task();
    let long = Arc::new(LockKeys::new("p", &"n".repeat(MAX_CHANNEL)));
    let keys = Arc::new(LockKeys::new("p", "x"));
    let _long_waiter = sub.join(sub.expect(&long, &owner(1)));
    let _waiter = sub.join(sub.expect(&keys, &owner(2)));
    // One instant for every pass: on a loaded machine the test's 10 ms connect timeout could
    // otherwise pass between them and drop the connection this test looks at.
    let now = Instant::now();
    for _ in 0..3 {
        task.reconcile(now);
    }
    let subscribed: Vec<&Sent> = task.shards[0]
        .sent
        .iter()
        .map(|(sent, _)| sent)
        .filter(|sent| matches!(sent, Sent::Subscribe(_)))
        .collect();
    assert!(
        subscribed == [&Sent::Subscribe(both(&keys))],
        "{} subscriptions sent, the long channel's among them",
        subscribed.len()
    );
    assert!(task.unreadable.contains(long.channel()));
    assert!(task.paused_until.is_none());
}

#[test]
fn a_channel_dropped_because_the_map_lists_no_master_for_its_slot_is_unconfirmed() {
    let (sub, mut task, _listener, node) = task();
    let keys = Arc::new(LockKeys::new("p", "x"));
    let _waiter = sub.join(sub.expect(&keys, &owner(1)));
    task.reconcile(Instant::now());
    task.handle(0, Frame::Simple(b"PONG".to_vec())).unwrap();
    for answer in answers("ssubscribe", &keys) {
        task.handle(0, answer).unwrap();
    }
    assert!(confirmed(&sub, &keys));

    // The map is read again mid-failover and lists no master for the lock's slot: the
    // channel is unsubscribed, so a joiner must not take it as watched.
    let slot = keys.slot();
    task.routes.slots = Some(Arc::new(SlotMap::new(vec![
        (0, slot - 1, node.clone()),
        (slot + 1, 16383, node.clone()),
    ])));
    task.reconcile(Instant::now());
    assert!(
        matches!(task.shards[0].sent.back(), Some((Sent::Unsubscribe(c), _)) if *c == both(&keys))
    );
    assert!(
        !confirmed(&sub, &keys),
        "unsubscribed, yet still confirmed: the next subscription would wake nobody"
    );
}
/// One server (or Sentinel's master): the answer to SUBSCRIBE confirms the channel, which
/// gives the waiter its permit to try again. It once checked the slot map, which only a
/// Cluster has, so on one server no subscription was ever confirmed, and a release
/// between a waiter's attempt and its subscription left it asleep until the lock's TTL.
#[test]
fn on_one_server_the_subscription_is_confirmed() {
    let (sub, mut task, _listener, node) = task();
    task.routes.routing = Routing::Server;
    task.routes.slots = None;
    let (host, port) = split_host_port(&node).unwrap();
    let addr = ConnectionAddr::Tcp(host.to_string(), port);
    task.routes.server = Some((addr, node, 0));
    let keys = Arc::new(LockKeys::new("p", "x"));
    let waiter = sub.join(sub.expect(&keys, &owner(1)));
    task.reconcile(Instant::now());
    task.handle(0, Frame::Simple(b"PONG".to_vec())).unwrap();
    let [grant_answer, answer] = answers("subscribe", &keys);
    task.handle(0, grant_answer).unwrap();
    assert!(
        !confirmed(&sub, &keys),
        "confirmed before the channel's own answer"
    );
    task.handle(0, answer).unwrap();
    assert!(confirmed(&sub, &keys));
    assert_eq!(waiter.wait(Duration::ZERO), Wake::Permit);
}

#[test]
fn a_subscription_is_confirmed_only_by_the_answer_that_names_its_channel() {
    let (sub, mut task, _listener, _node) = task();
    let [x, z, w] = ["x", "z", "w"].map(|name| Arc::new(LockKeys::new("p", name)));
    let leaving = sub.join(sub.expect(&x, &owner(1)));
    task.reconcile(Instant::now());
    task.handle(0, Frame::Simple(b"PONG".to_vec())).unwrap();
    for answer in answers("ssubscribe", &x) {
        task.handle(0, answer).unwrap();
    }

    // x's last waiter leaves as waiters for z and w arrive: one reconcile sends
    // SUNSUBSCRIBE x, SSUBSCRIBE z, SSUBSCRIBE w (in the map's order).
    drop(leaving);
    let _z = sub.join(sub.expect(&z, &owner(2)));
    let _w = sub.join(sub.expect(&w, &owner(3)));
    task.reconcile(Instant::now());
    let subscribed: Vec<String> = task.shards[0]
        .sent
        .iter()
        .filter_map(|(sent, _)| match sent {
            Sent::Subscribe(c) => c.back().cloned(),
            _ => None,
        })
        .collect();
    let (stays, moved) = (&subscribed[0], &subscribed[1]);

    // The node gives away the slot of x and of the second lock just before it runs
    // them: it pushes sunsubscribe x, then answers MOVED (a Redis 7.0 node answers
    // SUNSUBSCRIBE of a slot it does not serve with MOVED), the subscription, MOVED.
    // Redis 7.0.15 was seen sending exactly these four frames.
    // Each subscription names the lock's grant channel first, which is answered first.
    let frames = [
        push("sunsubscribe", &grant(&x)),
        push("sunsubscribe", x.channel()),
        Frame::Error("MOVED 1 127.0.0.1:1".into()),
        push("ssubscribe", &format!("{stays}:c0ffee")),
        push("ssubscribe", stays),
        Frame::Error("MOVED 1 127.0.0.1:1".into()),
    ];
    for frame in frames {
        if let Err(e) = task.handle(0, frame) {
            task.fail(0, &e); // as `run` does
            break;
        }
    }
    let entries = sub.shared.entries.lock();
    assert!(
        !entries[moved].state.lock().confirmed,
        "confirmed by the answer for another channel, while the node refused it"
    );
}

/// A node the slot map names is reached as the seed nodes are: over TLS when they are
/// (`rediss://`), its certificate checked against the host the map gives (an IP address or
/// a name; an IPv6 address comes in brackets).
#[cfg(feature = "tls")]
#[test]
fn cluster_nodes_are_dialled_over_tls_when_the_seeds_are() {
    for (seed, tls) in [
        ("rediss://127.0.0.1:1/", true),
        ("redis://127.0.0.1:1/", false),
    ] {
        let deployment = Deployment::Cluster(vec![seed.to_string()]);
        let (_sub, task) = routed_by_slots(&deployment, Duration::from_millis(10));
        for (node, addr) in [
            ("127.0.0.1:7000", "127.0.0.1:7000"),
            ("[::1]:7001", "[::1]:7001"),
            ("localhost:7002", "127.0.0.1:7002"),
        ] {
            let Ok(Dial::Tcp {
                untried,
                tls: start,
            }) = task.routes.dial(node)
            else {
                panic!("{node} is not dialled over TCP");
            };
            assert_eq!(start.is_some(), tls, "{seed}: {node}");
            let addr: SocketAddr = addr.parse().unwrap();
            assert!(untried.contains(&addr), "{node}: {untried:?}");
        }
        assert!(task.routes.dial("no port").is_err());
    }
}
