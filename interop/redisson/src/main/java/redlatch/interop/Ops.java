package redlatch.interop;

import java.lang.management.ManagementFactory;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.redisson.RedissonRedLock;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;

/**
 * Each operation is one Redisson call, made on the calling Java thread. Values: {@code true},
 * {@code false}, integers, permit ids, {@code null}.
 *
 * <p>Lock kinds ({@code KIND}): {@code lock} (getLock), {@code fair} (getFairLock), {@code spin}
 * (getSpinLock), {@code fenced} (getFencedLock: lock and trylock reply the token), {@code read}
 * and {@code write} (getReadWriteLock's two), {@code multi} (getMultiLock over getLock of each
 * comma-separated name), {@code redlock} (RedissonRedLock over getLock(name) of every client).
 * A lease of {@code -1} is Redisson's "no lease": its watchdog keeps the lock.
 *
 * <pre>
 * lock KIND NAME LEASE_MS             lock() / lock(lease)              -> null | token
 * lockint KIND NAME LEASE_MS          lockInterruptibly                 -> null
 * trylock KIND NAME WAIT_MS LEASE_MS  tryLock(wait[, lease])            -> bool | token | null
 * unlock KIND NAME                    unlock()                          -> null
 * forceunlock KIND NAME               forceUnlock()                     -> bool
 * islocked KIND NAME                  isLocked()                        -> bool
 * held KIND NAME                      isHeldByCurrentThread()           -> bool
 * holdcount KIND NAME                 getHoldCount()                    -> int
 * ttl KIND NAME                       remainTimeToLive()                -> ms
 * token NAME                          getFencedLock(NAME).getToken()    -> long | null
 * threadid                            Thread.currentThread().getId()    -> long
 * psem.* NAME ...                     getPermitExpirableSemaphore(NAME): acquire LEASE_MS,
 *                                     tryacquire WAIT_MS LEASE_MS, release ID, tryrelease ID,
 *                                     available, permits, acquired, setpermits N,
 *                                     trysetpermits N, addpermits N, updatelease ID LEASE_MS
 * sem.* NAME ...                      getSemaphore(NAME): acquire N, tryacquire N WAIT_MS,
 *                                     release N, available, trysetpermits N, addpermits N,
 *                                     drain
 * latch.* NAME ...                    getCountDownLatch(NAME): trysetcount N, countdown, count,
 *                                     await TIMEOUT_MS, delete
 * loop ...                            see {@link Loop}
 * cpu                                 the process's CPU time, ns
 * sleep MS                            Thread.sleep
 * </pre>
 */
final class Ops {
    private final List<RedissonClient> clients;
    private final RedissonClient redisson;

    Ops(List<RedissonClient> clients) {
        this.clients = clients;
        this.redisson = clients.get(0);
    }

    RLock lock(String kind, String name) {
        switch (kind) {
            case "lock": return redisson.getLock(name);
            case "fair": return redisson.getFairLock(name);
            case "spin": return redisson.getSpinLock(name);
            case "fenced": return redisson.getFencedLock(name);
            case "read": return redisson.getReadWriteLock(name).readLock();
            case "write": return redisson.getReadWriteLock(name).writeLock();
            case "multi": {
                String[] names = name.split(",");
                RLock[] locks = new RLock[names.length];
                for (int i = 0; i < names.length; i++) {
                    locks[i] = redisson.getLock(names[i]);
                }
                return redisson.getMultiLock(locks);
            }
            case "redlock": {
                RLock[] locks = new RLock[clients.size()];
                for (int i = 0; i < locks.length; i++) {
                    locks[i] = clients.get(i).getLock(name);
                }
                return new RedissonRedLock(locks);
            }
            default: throw new IllegalArgumentException("unknown lock kind " + kind);
        }
    }

    String run(String op, String[] a) throws Exception {
        switch (op) {
            case "lock": {
                RLock lock = lock(a[0], a[1]);
                long lease = Long.parseLong(a[2]);
                if (lock instanceof RFencedLock) {
                    RFencedLock fenced = (RFencedLock) lock;
                    Long token = lease < 0 ? fenced.lockAndGetToken()
                            : fenced.lockAndGetToken(lease, TimeUnit.MILLISECONDS);
                    return String.valueOf(token);
                }
                if (lease < 0) {
                    lock.lock();
                } else {
                    lock.lock(lease, TimeUnit.MILLISECONDS);
                }
                return null;
            }
            case "lockint": {
                RLock lock = lock(a[0], a[1]);
                long lease = Long.parseLong(a[2]);
                if (lease < 0) {
                    lock.lockInterruptibly();
                } else {
                    lock.lockInterruptibly(lease, TimeUnit.MILLISECONDS);
                }
                return null;
            }
            case "trylock": {
                RLock lock = lock(a[0], a[1]);
                long wait = Long.parseLong(a[2]);
                long lease = Long.parseLong(a[3]);
                if (lock instanceof RFencedLock) {
                    return String.valueOf(((RFencedLock) lock).tryLockAndGetToken(wait, lease, TimeUnit.MILLISECONDS));
                }
                boolean taken = lease < 0 ? lock.tryLock(wait, TimeUnit.MILLISECONDS)
                        : lock.tryLock(wait, lease, TimeUnit.MILLISECONDS);
                return String.valueOf(taken);
            }
            case "unlock": lock(a[0], a[1]).unlock(); return null;
            case "forceunlock": return String.valueOf(lock(a[0], a[1]).forceUnlock());
            case "islocked": return String.valueOf(lock(a[0], a[1]).isLocked());
            case "held": return String.valueOf(lock(a[0], a[1]).isHeldByCurrentThread());
            case "holdcount": return String.valueOf(lock(a[0], a[1]).getHoldCount());
            case "ttl": return String.valueOf(lock(a[0], a[1]).remainTimeToLive());
            case "token": return String.valueOf(redisson.getFencedLock(a[0]).getToken());
            case "threadid": return String.valueOf(Thread.currentThread().getId());
            case "cpu": return String.valueOf(cpuNanos());
            case "sleep": Thread.sleep(Long.parseLong(a[0])); return null;
            case "loop": return new Loop(this, a).run();
            default:
                if (op.startsWith("psem.")) {
                    return permitSemaphore(op.substring(5), redisson.getPermitExpirableSemaphore(a[0]), a);
                }
                if (op.startsWith("sem.")) {
                    return semaphore(op.substring(4), redisson.getSemaphore(a[0]), a);
                }
                if (op.startsWith("latch.")) {
                    return latch(op.substring(6), redisson.getCountDownLatch(a[0]), a);
                }
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private static String permitSemaphore(String op, RPermitExpirableSemaphore s, String[] a) throws Exception {
        switch (op) {
            case "acquire": {
                long lease = Long.parseLong(a[1]);
                return lease < 0 ? s.acquire() : s.acquire(lease, TimeUnit.MILLISECONDS);
            }
            case "tryacquire": {
                long wait = Long.parseLong(a[1]);
                long lease = Long.parseLong(a[2]);
                return String.valueOf(lease < 0 ? s.tryAcquire(wait, TimeUnit.MILLISECONDS)
                        : s.tryAcquire(wait, lease, TimeUnit.MILLISECONDS));
            }
            case "release": s.release(a[1]); return null;
            case "tryrelease": return String.valueOf(s.tryRelease(a[1]));
            case "available": return String.valueOf(s.availablePermits());
            case "permits": return String.valueOf(s.getPermits());
            case "acquired": return String.valueOf(s.acquiredPermits());
            case "setpermits": s.setPermits(Integer.parseInt(a[1])); return null;
            case "trysetpermits": return String.valueOf(s.trySetPermits(Integer.parseInt(a[1])));
            case "addpermits": s.addPermits(Integer.parseInt(a[1])); return null;
            case "updatelease":
                return String.valueOf(s.updateLeaseTime(a[1], Long.parseLong(a[2]), TimeUnit.MILLISECONDS));
            default: throw new IllegalArgumentException("unknown op psem." + op);
        }
    }

    private static String semaphore(String op, RSemaphore s, String[] a) throws Exception {
        switch (op) {
            case "acquire": s.acquire(Integer.parseInt(a[1])); return null;
            case "tryacquire":
                return String.valueOf(s.tryAcquire(Integer.parseInt(a[1]), Long.parseLong(a[2]), TimeUnit.MILLISECONDS));
            case "release": s.release(Integer.parseInt(a[1])); return null;
            case "available": return String.valueOf(s.availablePermits());
            case "trysetpermits": return String.valueOf(s.trySetPermits(Integer.parseInt(a[1])));
            case "addpermits": s.addPermits(Integer.parseInt(a[1])); return null;
            case "drain": return String.valueOf(s.drainPermits());
            default: throw new IllegalArgumentException("unknown op sem." + op);
        }
    }

    private static String latch(String op, RCountDownLatch l, String[] a) throws Exception {
        switch (op) {
            case "trysetcount": return String.valueOf(l.trySetCount(Long.parseLong(a[1])));
            case "countdown": l.countDown(); return null;
            case "count": return String.valueOf(l.getCount());
            case "await": return String.valueOf(l.await(Long.parseLong(a[1]), TimeUnit.MILLISECONDS));
            case "delete": return String.valueOf(l.delete());
            default: throw new IllegalArgumentException("unknown op latch." + op);
        }
    }

    static long cpuNanos() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
        }
        return -1;
    }
}
