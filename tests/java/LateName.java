// pgjdbc with its default settings through `plbbench proxy`
// (docs/proxy.md, "Clients that name themselves late"): without
// assumeMinServerVersion=9.0 pgjdbc logs in with no application_name and
// sends SET extra_float_digits and SET application_name as its first
// queries. Compiled and run by tests/proxy_real.rs.
// Usage: LateName JDBC_URL USER PASSWORD APPLICATION_NAME
// Prints the server's port, its application_name and extra_float_digits.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.Properties;

public class LateName {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        props.setProperty("ApplicationName", args[3]);
        props.setProperty("connectTimeout", "10");
        String sql = "SELECT inet_server_port(), current_setting('application_name'), "
                + "current_setting('extra_float_digits')";
        try (Connection c = DriverManager.getConnection(args[0], props);
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(sql)) {
            rs.next();
            System.out.println(rs.getInt(1) + " " + rs.getString(2) + " " + rs.getString(3));
        }
    }
}
