import PostgresStores
import PushStores
import Foundation
import HeraldService
import MockAPNS
import PostgresNIO
import Testing

/// `herald config check`, `herald token register|unregister` and `herald send` as an operator
/// runs them, against the real services and a running `herald run`.
@Suite(.timeLimit(.minutes(5)))
struct OperatorCommandsTests {
    /// Runs `herald <arguments>` to its end; returns its exit status, standard output and error.
    static func herald(_ arguments: [String], environment: [String: String]) async throws -> (status: Int32, output: String, errors: String) {
        let binary = try TestEnvironment.heraldBinary
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.environment = environment.merging(["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "", "HERALD_LOG_FORMAT": "text"]) { _, new in new }
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // Read while it runs, so a full pipe cannot stall it.
        async let outputData = Task.detached { output.fileHandleForReading.readDataToEndOfFile() }.value
        async let errorData = Task.detached { errors.fileHandleForReading.readDataToEndOfFile() }.value
        let (out, err) = await (outputData, errorData)
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }

    /// Finding 8: while another instance holds the partition maintenance lock, `herald migrate`
    /// applies the migrations and says it left the partitions to that instance, rather than
    /// reporting them ready.
    @Test func migrateSaysWhenAnotherInstanceIsMaintainingThePartitions() async throws {
        let (status, logs) = try await RegistryDatabase.withStore { _, database in
            try await database.withConnection { connection in
                _ = try await connection.query("SELECT pg_advisory_lock(7215300412)", logger: database.sqlLogger)
                let result = try await Self.herald(["migrate"], environment: ["HERALD_POSTGRES_URL": TestEnvironment.postgresURL])
                _ = try await connection.query("SELECT pg_advisory_unlock(7215300412)", logger: database.sqlLogger)
                return (result.status, result.output + result.errors)
            }
        }
        #expect(status == 0)
        #expect(logs.contains("partitions not checked: another instance is maintaining them"), "\(logs)")
        #expect(!logs.contains("partitions ready"))
    }

    @Test func configCheckPrintsTheEffectiveConfigurationWithoutSecretsAndNamesAMistake() async throws {
        let testbed = try HeraldTestbed()
        var environment = try await testbed.withMocks { try await testbed.heraldEnvironment(group: "check") }
        let url = try #require(environment["HERALD_POSTGRES_URL"])
        environment["HERALD_POSTGRES_URL"] = url.replacingOccurrences(of: "postgres://postgres@", with: "postgres://postgres:s3cret-pw@")
        environment["HERALD_KAFKA_SASL_PASSWORD"] = "kafka-s3cret"
        let good = try await Self.herald(["config", "check"], environment: environment)
        #expect(good.status == 0, "\(good.errors)")
        #expect(good.output.contains("configuration ok"))
        #expect(good.output.contains("apns default credential: token(keyID: \(testbed.key.keyID), teamID: \(testbed.key.teamID))"))
        #expect(good.output.contains("kafka properties set:") && good.output.contains("sasl.password"))
        #expect(!good.output.contains("s3cret"), "no password printed")

        environment["HERALD_POLL_BATCH_SIZE"] = "0"
        let bad = try await Self.herald(["config", "check"], environment: environment)
        #expect(bad.status == 2)
        #expect(bad.errors.contains("HERALD_POLL_BATCH_SIZE must be an integer in 1...100000"), "\(bad.errors)")
    }

    @Test func tokensRegisteredAndASmokeTestSentFromTheCommandLine() async throws {
        let testbed = try HeraldTestbed()
        let token = TestDevice.randomToken()
        try await testbed.withMocks {
            let environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            let herald = try await testbed.startHerald(environment)

            let registered = try await Self.herald(
                ["token", "register", "--user", "u-ops", "--topic", testbed.bundleID, "--token", token],
                environment: environment
            )
            #expect(registered.status == 0, "\(registered.errors)")
            #expect(
                registered.output
                    == "published register of apns token \(token.prefix(8))… of user u-ops for \(testbed.bundleID) (production) to \(testbed.topics.tokens)\n")
            try await testbed.waitForActiveTokens(users: ["u-ops"], count: 1)

            let sent = try await Self.herald(
                ["send", "--user", "u-ops", "--topic", testbed.bundleID, "--alert", "smoke test", "--timeout", "60"],
                environment: environment
            )
            #expect(sent.status == 0, "\(sent.output)\(sent.errors)")
            let lines = sent.output.split(separator: "\n")
            #expect(lines.first?.hasPrefix("published event herald-send-") == true)
            #expect(lines.dropFirst().contains { $0.hasPrefix("delivered: token \(token.prefix(8))… (production), APNs 200") }, "\(sent.output)")
            #expect(testbed.production.pushCount(token: token) == 1)

            let unregistered = try await Self.herald(["token", "unregister", "--topic", testbed.bundleID, "--token", token], environment: environment)
            #expect(unregistered.status == 0, "\(unregistered.errors)")
            try await HeraldApplication.withTokenStore(postgresURL: try PostgresURL(TestEnvironment.postgresURL), logger: testbed.logger) { store in
                let deadline = ContinuousClock.now + .seconds(60)
                while try await !store.activeTokens(topic: testbed.bundleID, userIDs: ["u-ops"], environment: nil).isEmpty {
                    guard ContinuousClock.now < deadline else { throw TestFailure("the token was not unregistered in 60 s") }
                    try await Task.sleep(for: .milliseconds(200))
                }
            }

            let refused = try await Self.herald(["token", "register", "--user", "u", "--topic", testbed.bundleID, "--token", "xyz"], environment: environment)
            #expect(refused.status == 2)
            #expect(refused.errors.contains("refused: invalid_token"), "\(refused.errors)")

            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}
