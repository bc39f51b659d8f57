package redlatch.interop;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import org.redisson.api.RLock;

/**
 * A fleet of Java threads taking one lock kind in a loop, for the fairness tests and the
 * benchmark report: each thread acquires, holds, releases, thinks, until the duration ends.
 *
 * <pre>
 * loop KIND NAME KEYS THREADS DURATION_MS HOLD_US THINK_US WAIT_MS LEASE_MS INTERVALS [SAMPLES]
 * </pre>
 * KEYS &gt; 1 picks a name {@code NAME-<k>} at random per acquisition. WAIT_MS &lt; 0 waits with
 * lock(), else tryLock(WAIT_MS, LEASE_MS). Times are System.nanoTime(), which on Linux is
 * CLOCK_MONOTONIC, the clock a Rust process reads too: the intervals of both sides compare.
 *
 * <p>Reply: {@code acq=.. timeouts=.. errors=.. per_thread=a,b,.. wait_p50_ns=.. wait_p99_ns=..
 * wait_max_ns=.. cycle_p50_ns=.. cycle_p99_ns=.. cpu_ns=.. elapsed_ns=.. [first_error=..]
 * [intervals=start-end,...]} where an interval runs from lock() returning to unlock() being
 * called (inside the hold, so two intervals that overlap are two holders at once), and a wait
 * from the call to acquire to its return.
 *
 * <p>With SAMPLES {@code 1} (the benchmark report's), the reply also carries every acquisition
 * as {@code samples=thread:t0:t1:t2:t3,...}: the acquire called, returned, unlock called,
 * returned (System.nanoTime()), so that the Rust side computes hand-offs, waits and cycles
 * from both sides' samples alike. Every reply also carries {@code jit_ms=}, the JIT compilers'
 * time over the loop, which tells when the JVM is warm (its compilers idle).
 */
final class Loop {
    private final Ops ops;
    private final String kind;
    private final String name;
    private final int keys;
    private final int threads;
    private final long durationNs;
    private final long holdNs;
    private final long thinkNs;
    private final long waitMs;
    private final long leaseMs;
    private final boolean intervals;
    private final boolean samples;

    Loop(Ops ops, String[] a) {
        this.ops = ops;
        kind = a[0];
        name = a[1];
        keys = Integer.parseInt(a[2]);
        threads = Integer.parseInt(a[3]);
        durationNs = TimeUnit.MILLISECONDS.toNanos(Long.parseLong(a[4]));
        holdNs = TimeUnit.MICROSECONDS.toNanos(Long.parseLong(a[5]));
        thinkNs = TimeUnit.MICROSECONDS.toNanos(Long.parseLong(a[6]));
        waitMs = Long.parseLong(a[7]);
        leaseMs = Long.parseLong(a[8]);
        intervals = a[9].equals("1");
        samples = a.length > 10 && a[10].equals("1");
    }

    private final class Worker extends Thread {
        long[] waits = new long[256];
        long[] cycles = new long[256];
        final List<long[]> held = new ArrayList<>();
        long[] stamps = new long[0];
        int acquired;
        int timeouts;
        int errors;
        String firstError;
        final long deadline;

        Worker(int n, long deadline) {
            super("java-loop-" + n);
            this.deadline = deadline;
        }

        @Override
        public void run() {
            ThreadLocalRandom random = ThreadLocalRandom.current();
            while (System.nanoTime() < deadline) {
                String key = keys > 1 ? name + "-" + random.nextInt(keys) : name;
                RLock lock = ops.lock(kind, key);
                long t0 = System.nanoTime();
                try {
                    boolean taken;
                    if (waitMs < 0) {
                        if (leaseMs < 0) {
                            lock.lock();
                        } else {
                            lock.lock(leaseMs, TimeUnit.MILLISECONDS);
                        }
                        taken = true;
                    } else {
                        taken = leaseMs < 0 ? lock.tryLock(waitMs, TimeUnit.MILLISECONDS)
                                : lock.tryLock(waitMs, leaseMs, TimeUnit.MILLISECONDS);
                    }
                    long t1 = System.nanoTime();
                    if (!taken) {
                        timeouts++;
                        continue;
                    }
                    if (holdNs > 0) {
                        LockSupport.parkNanos(holdNs);
                    }
                    long t2 = System.nanoTime();
                    lock.unlock();
                    long t3 = System.nanoTime();
                    if (acquired == waits.length) {
                        waits = Arrays.copyOf(waits, acquired * 2);
                        cycles = Arrays.copyOf(cycles, acquired * 2);
                    }
                    waits[acquired] = t1 - t0;
                    cycles[acquired] = t3 - t0;
                    acquired++;
                    if (intervals) {
                        held.add(new long[] {t1, t2});
                    }
                    if (samples) {
                        int at = (acquired - 1) * 4;
                        if (at + 4 > stamps.length) {
                            stamps = Arrays.copyOf(stamps, Math.max(1024, stamps.length * 2));
                        }
                        stamps[at] = t0;
                        stamps[at + 1] = t1;
                        stamps[at + 2] = t2;
                        stamps[at + 3] = t3;
                    }
                } catch (Exception e) {
                    errors++;
                    if (firstError == null) {
                        firstError = e.getClass().getSimpleName() + ":" + String.valueOf(e.getMessage()).replace(' ', '_');
                    }
                }
                if (thinkNs > 0) {
                    LockSupport.parkNanos(thinkNs);
                }
            }
        }
    }

    String run() throws InterruptedException {
        java.lang.management.CompilationMXBean jit = java.lang.management.ManagementFactory.getCompilationMXBean();
        long jit0 = jit.getTotalCompilationTime();
        long cpu0 = Ops.cpuNanos();
        long start = System.nanoTime();
        List<Worker> workers = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            Worker w = new Worker(i, start + durationNs);
            workers.add(w);
            w.start();
        }
        for (Worker w : workers) {
            w.join();
        }
        long elapsed = System.nanoTime() - start;
        long cpu = Ops.cpuNanos() - cpu0;
        long jitMs = jit.getTotalCompilationTime() - jit0;

        int acq = 0, timeouts = 0, errors = 0;
        String firstError = null;
        StringBuilder perThread = new StringBuilder();
        for (Worker w : workers) {
            acq += w.acquired;
            timeouts += w.timeouts;
            errors += w.errors;
            if (firstError == null) {
                firstError = w.firstError;
            }
            if (perThread.length() > 0) {
                perThread.append(',');
            }
            perThread.append(w.acquired);
        }
        long[] waits = gather(workers, true);
        long[] cycles = gather(workers, false);
        StringBuilder reply = new StringBuilder();
        reply.append("acq=").append(acq)
                .append(" timeouts=").append(timeouts)
                .append(" errors=").append(errors)
                .append(" per_thread=").append(perThread)
                .append(" wait_p50_ns=").append(percentile(waits, 0.50))
                .append(" wait_p99_ns=").append(percentile(waits, 0.99))
                .append(" wait_max_ns=").append(waits.length == 0 ? 0 : waits[waits.length - 1])
                .append(" cycle_p50_ns=").append(percentile(cycles, 0.50))
                .append(" cycle_p99_ns=").append(percentile(cycles, 0.99))
                .append(" cpu_ns=").append(cpu)
                .append(" elapsed_ns=").append(elapsed);
        if (firstError != null) {
            reply.append(" first_error=").append(firstError);
        }
        if (intervals) {
            reply.append(" intervals=");
            boolean first = true;
            for (Worker w : workers) {
                for (long[] h : w.held) {
                    if (!first) {
                        reply.append(',');
                    }
                    first = false;
                    reply.append(h[0]).append('-').append(h[1]);
                }
            }
        }
        reply.append(" jit_ms=").append(jitMs);
        if (samples) {
            reply.append(" samples=");
            boolean first = true;
            for (int n = 0; n < workers.size(); n++) {
                Worker w = workers.get(n);
                for (int i = 0; i < w.acquired; i++) {
                    if (!first) {
                        reply.append(',');
                    }
                    first = false;
                    reply.append(n);
                    for (int k = 0; k < 4; k++) {
                        reply.append(':').append(w.stamps[i * 4 + k]);
                    }
                }
            }
        }
        return reply.toString();
    }

    private static long[] gather(List<Worker> workers, boolean waits) {
        int n = 0;
        for (Worker w : workers) {
            n += w.acquired;
        }
        long[] all = new long[n];
        int i = 0;
        for (Worker w : workers) {
            System.arraycopy(waits ? w.waits : w.cycles, 0, all, i, w.acquired);
            i += w.acquired;
        }
        Arrays.sort(all);
        return all;
    }

    private static long percentile(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = (int) Math.min(sorted.length - 1, Math.round(q * (sorted.length - 1)));
        return sorted[i];
    }
}
