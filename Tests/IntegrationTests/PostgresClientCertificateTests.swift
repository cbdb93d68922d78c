import Foundation
import Testing

/// Herald on a PostgreSQL that takes Herald's role only with a client certificate over TLS
/// (scripts/services.sh: `hostssl ... cert` for the role herald_cert, a private CA, a server
/// certificate for 127.0.0.1), configured only through the documented keys and files: the URL
/// from HERALD_POSTGRES_URL_FILE with `sslmode=verify-full`, `sslrootcert`, `sslcert` and `sslkey`.
@Suite(.timeLimit(.minutes(2)))
struct PostgresClientCertificateTests {
    @Test func heraldConnectsWithVerifyFullAndAClientCertificateAndIsRefusedWithout() async throws {
        guard let tls = ProcessInfo.processInfo.environment["HERALD_TEST_POSTGRES_TLS_DIR"],
            let plain = ProcessInfo.processInfo.environment["HERALD_POSTGRES_URL"],
            let port = URLComponents(string: plain)?.port
        else {
            print("PostgresClientCertificateTests: skipped, the local services have no TLS (openssl missing?)")
            return
        }
        let directory = try TestEnvironment.temporaryDirectory()
        let base = "postgres://herald_cert@127.0.0.1:\(port)/herald?sslmode=verify-full&sslrootcert=\(tls)/ca.pem"
        func migrate(_ url: String) async throws -> (status: Int32, output: String, errors: String) {
            let file = directory.appendingPathComponent("postgres-url-\(UUID().uuidString)")
            // As a mounted Secret holds it: the URL and a final newline.
            try Data((url + "\n").utf8).write(to: file)
            return try await OperatorCommandsTests.herald(["migrate"], environment: ["HERALD_POSTGRES_URL_FILE": file.path])
        }
        let withCertificate = try await migrate(base + "&sslcert=\(tls)/client.pem&sslkey=\(tls)/client.key")
        #expect(withCertificate.status == 0, "\(withCertificate.errors)")
        #expect(withCertificate.errors.contains("delivery ledger partitions"), "\(withCertificate.errors)")

        // Refused by the server: said at once, with the server's reason, not after the pool's
        // minute of retries.
        let started = ContinuousClock.now
        let withoutCertificate = try await migrate(base)
        #expect(withoutCertificate.status != 0, "the server takes herald_cert only with its certificate")
        #expect(started.duration(to: .now) < .seconds(10))
        let reason = "refused the connection: connection requires a valid client certificate (SQLSTATE 28000)"
        #expect(withoutCertificate.errors.contains(reason), "\(withoutCertificate.errors)")

        let unreadableKey = try await migrate(base + "&sslcert=\(tls)/client.pem&sslkey=\(tls)/missing.key")
        #expect(unreadableKey.status == 2, "a key that cannot be used is a configuration error at start-up")
        #expect(unreadableKey.errors.contains("sslkey"), "\(unreadableKey.errors)")
    }
}
