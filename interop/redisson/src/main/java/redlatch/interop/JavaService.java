package redlatch.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.BufferedOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.redisson.Redisson;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import org.redisson.config.ReadMode;

/**
 * A Java service on the real Redisson, driven line by line over stdin/stdout.
 *
 * <p>Start: {@code JavaService <mode> <addresses> [--watchdog-ms N] [--name CLIENT_NAME] [--name-prefix P]} where
 * mode is {@code single} (one or more comma-separated {@code redis://} URLs: one RedissonClient
 * each; the first serves every call, all of them a Redlock), {@code sentinel MASTER urls} or
 * {@code cluster urls}. It prints {@code ready <redisson version> <java version> <client id>}
 * (the id is the {@code <uuid>} of Redisson's owner fields {@code <uuid>:<thread id>}).
 * Every setting is Redisson's default but the watchdog and the name mapper (when given: every
 * name {@code n} stored as {@code <prefix>n}), the client name (so that
 * {@code CLIENT LIST} tells its connections), and, under Sentinel and on a Cluster, reads from
 * the master ({@code ReadMode.MASTER}; the default reads from replicas, so {@code isLocked}
 * right after a lock could read a replica that has not seen it yet: true of Redisson, but a
 * flaky test).
 *
 * <p>Requests: {@code <id> <thread> <op> [args...]}, one per line, space-separated. Each runs on
 * the service's Java thread number {@code <thread>} (a thread of its own, named
 * {@code java-<thread>}, made on first use), so that a thread that locked is the thread that
 * unlocks, as in a real service; requests for one thread run in order, requests for different
 * threads at once. Replies, in any order: {@code <id> ok [value]} or
 * {@code <id> err <exception class> <message>}. Thread {@code 0} is special: its requests run on
 * the reading thread itself, at once (the service's own operations: interrupt, cpu, exit).
 */
public final class JavaService {
    private final List<RedissonClient> clients;
    private final Ops ops;
    private final Map<Long, ExecutorService> threads = new ConcurrentHashMap<>();
    private final Map<Long, Thread> javaThreads = new ConcurrentHashMap<>();
    private final PrintStream out;

    private JavaService(List<RedissonClient> clients, PrintStream out) {
        this.clients = clients;
        this.out = out;
        this.ops = new Ops(clients);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: JavaService single|sentinel|cluster ... (see the class docs)");
            System.exit(2);
        }
        long watchdogMs = 30_000;
        String clientName = "redlatch-java";
        String namePrefix = null;
        List<String> rest = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--watchdog-ms": watchdogMs = Long.parseLong(args[++i]); break;
                case "--name": clientName = args[++i]; break;
                case "--name-prefix": namePrefix = args[++i]; break;
                default: rest.add(args[i]);
            }
        }
        List<RedissonClient> clients = new ArrayList<>();
        String mode = rest.get(0);
        switch (mode) {
            case "single":
                for (String url : rest.get(1).split(",")) {
                    Config config = base(watchdogMs);
                    mapNames(config.useSingleServer().setAddress(url).setClientName(clientName), namePrefix);
                    clients.add(Redisson.create(config));
                }
                break;
            case "sentinel": {
                Config config = base(watchdogMs);
                mapNames(config.useSentinelServers(), namePrefix)
                        .setMasterName(rest.get(1))
                        .addSentinelAddress(rest.get(2).split(","))
                        .setCheckSentinelsList(false)
                        .setReadMode(ReadMode.MASTER)
                        .setClientName(clientName);
                clients.add(Redisson.create(config));
                break;
            }
            case "cluster": {
                Config config = base(watchdogMs);
                mapNames(config.useClusterServers(), namePrefix)
                        .addNodeAddress(rest.get(1).split(","))
                        .setReadMode(ReadMode.MASTER)
                        .setClientName(clientName);
                clients.add(Redisson.create(config));
                break;
            }
            default:
                System.err.println("unknown mode " + mode);
                System.exit(2);
        }
        PrintStream out = new PrintStream(
                new BufferedOutputStream(new FileOutputStream(FileDescriptor.out)), false,
                StandardCharsets.UTF_8);
        String version = Redisson.class.getPackage().getImplementationVersion();
        out.println("ready " + version + " " + System.getProperty("java.version") + " "
                + clients.get(0).getId());
        out.flush();
        new JavaService(clients, out).serve();
    }

    /**
     * A NameMapper that stores every name under {@code prefix} (none when null). The
     * interface moved from {@code org.redisson.api} (3.x) to {@code org.redisson.config}
     * (4.x), so it is found from {@code setNameMapper}'s parameter and made as a proxy: one
     * source for every version.
     */
    private static <T extends org.redisson.config.BaseConfig<T>> T mapNames(T server, String prefix) {
        if (prefix == null) {
            return server;
        }
        try {
            java.lang.reflect.Method set = null;
            for (java.lang.reflect.Method m : server.getClass().getMethods()) {
                if (m.getName().equals("setNameMapper") && m.getParameterCount() == 1) {
                    set = m;
                }
            }
            Class<?> type = set.getParameterTypes()[0];
            Object mapper = java.lang.reflect.Proxy.newProxyInstance(type.getClassLoader(),
                    new Class<?>[] {type}, (proxy, method, args) -> {
                        switch (method.getName()) {
                            case "map": return prefix + args[0];
                            case "unmap": {
                                String name = (String) args[0];
                                return name.startsWith(prefix) ? name.substring(prefix.length()) : name;
                            }
                            case "hashCode": return System.identityHashCode(proxy);
                            case "equals": return proxy == args[0];
                            case "toString": return "NameMapper(" + prefix + ")";
                            default: throw new UnsupportedOperationException(method.getName());
                        }
                    });
            set.invoke(server, mapper);
            return server;
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot set a NameMapper", e);
        }
    }

    private static Config base(long watchdogMs) {
        Config config = new Config();
        config.setLockWatchdogTimeout(watchdogMs);
        return config;
    }

    private void serve() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            String[] words = line.trim().split(" ");
            String id = words[0];
            long thread = Long.parseLong(words[1]);
            String op = words[2];
            String[] args = Arrays.copyOfRange(words, 3, words.length);
            if (thread == 0) {
                if (op.equals("exit")) {
                    reply(id, "ok", null);
                    break;
                }
                run(id, op, args);
                continue;
            }
            threads.computeIfAbsent(thread, n -> Executors.newSingleThreadExecutor(task -> {
                Thread t = new Thread(task, "java-" + n);
                t.setDaemon(true);
                return t;
            })).submit(() -> {
                javaThreads.put(thread, Thread.currentThread());
                Thread.interrupted(); // an interrupt meant for an earlier request ends with it
                run(id, op, args);
            });
        }
        for (RedissonClient client : clients) {
            client.shutdown();
        }
        System.exit(0);
    }

    private void run(String id, String op, String[] args) {
        try {
            String value = op.equals("interrupt") ? interrupt(Long.parseLong(args[0])) : ops.run(op, args);
            reply(id, "ok", value);
        } catch (Throwable e) {
            Throwable shown = e;
            String message = String.valueOf(shown.getMessage());
            if (shown.getCause() != null && shown.getCause() != shown) {
                message += " | caused by " + shown.getCause().getClass().getSimpleName() + ": "
                        + shown.getCause().getMessage();
            }
            reply(id, "err", shown.getClass().getSimpleName() + " " + message.replace('\n', ' '));
        }
    }

    /** Interrupts what Java thread {@code thread} is doing (Thread.interrupt, as a service would). */
    private String interrupt(long thread) {
        Thread t = javaThreads.get(thread);
        if (t == null) {
            return "false";
        }
        t.interrupt();
        return "true";
    }

    private void reply(String id, String status, String value) {
        synchronized (out) {
            out.print(id);
            out.print(' ');
            out.print(status);
            if (value != null) {
                out.print(' ');
                out.print(value);
            }
            out.print('\n');
            out.flush();
        }
    }
}
