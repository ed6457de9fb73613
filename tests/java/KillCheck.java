// pgjdbc under a replica failure through `plbbench proxy` (docs/proxy.md,
// "Failures are errors, never hangs"): a session runs pg_sleep(30) on its
// replica while another thread kills that replica with `plbbench cluster
// fault down rN`; pgjdbc must get SQLSTATE 08006 within seconds, and a new
// connection must land on a survivor. Compiled and run by
// tests/proxy_real.rs (with PLBBENCH_STATE_DIR set for the cluster).
// Usage: KillCheck JDBC_URL USER PASSWORD APPLICATION_NAME PLBBENCH REPLICA_PORTS
// (REPLICA_PORTS: r1..rK's ports, comma-separated).
// Prints `killed rN sqlstate S after MS ms` and `reconnected PORT`.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;

public class KillCheck {
    static Connection connect(String[] args) throws SQLException {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        props.setProperty("ApplicationName", args[3]);
        props.setProperty("connectTimeout", "10");
        return DriverManager.getConnection(args[0], props);
    }

    static int port(Connection c) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT inet_server_port()")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    public static void main(String[] args) throws Exception {
        List<String> ports = Arrays.asList(args[5].split(","));
        Connection c = connect(args);
        int victim = port(c);
        int index = ports.indexOf(Integer.toString(victim));
        if (index < 0) {
            throw new IllegalStateException("port " + victim + " is not a replica's: " + ports);
        }
        String name = "r" + (index + 1);
        long[] killedAt = new long[1];
        Thread killer = new Thread(() -> {
            try {
                Thread.sleep(1000);
                killedAt[0] = System.nanoTime();
                Process p = new ProcessBuilder(args[4], "cluster", "fault", "down", name)
                        .redirectErrorStream(true).start();
                p.getInputStream().readAllBytes();
                if (p.waitFor() != 0) {
                    System.err.println("cluster fault down " + name + " failed");
                }
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
        killer.start();
        String state = "none";
        try (Statement s = c.createStatement()) {
            s.execute("SELECT pg_sleep(30)");
        } catch (SQLException e) {
            state = e.getSQLState();
            System.err.println("pgjdbc said: " + e.getMessage());
        }
        long failedAt = System.nanoTime();
        killer.join();
        c.close();
        System.out.println("killed " + name + " sqlstate " + state + " after "
                + (failedAt - killedAt[0]) / 1_000_000 + " ms");
        Thread.sleep(1000);
        try (Connection again = connect(args)) {
            System.out.println("reconnected " + port(again));
        }
    }
}
