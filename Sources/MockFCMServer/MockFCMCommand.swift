import ArgumentParser
import Foundation
import Logging
import MockFCM
import ServiceLifecycle
import UnixSignals
import _CryptoExtras

/// `mock-fcm`: runs ``MockFCMServer`` as a process for the demo, the benchmark and scripts.
@main
struct MockFCMCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mock-fcm",
        abstract: "An HTTP/2 + TLS server that answers like FCM's HTTP v1 API and Google's OAuth token endpoint.",
        discussion: """
            At start-up it generates a self-signed CA and a server certificate; clients must trust \
            the CA written by --ca-out. The token endpoint is POST /token: service-account key \
            files name it in token_uri. --service-account trusts an existing key file (its \
            private key gives the public key); --write-service-account generates a key and writes \
            a key file whose token_uri points at this server. SIGTERM or SIGINT stops it; it then \
            prints a one-line summary to stderr. Faults are off by default.
            """
    )

    @Option(help: "Address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "Port to listen on; 0 picks an ephemeral port (see --port-file).")
    var port: Int = 0

    @Option(name: .customLong("port-file"), help: ArgumentHelp("Write the bound port here once listening.", valueName: "path"))
    var portFile: String?

    @Option(name: .customLong("ca-out"), help: ArgumentHelp("Write the generated CA certificate (PEM) here.", valueName: "path"))
    var caOut: String?

    @Option(name: .customLong("service-account"), help: ArgumentHelp("Trust this service-account key file. Repeatable.", valueName: "path"))
    var serviceAccounts: [String] = []

    @Option(
        name: .customLong("write-service-account"),
        help: ArgumentHelp("Generate a key for PROJECT and write its key file to PATH once listening. Repeatable.", valueName: "project=path")
    )
    var writtenAccounts: [String] = []

    @Option(
        name: .customLong("static-access-token"),
        help: ArgumentHelp(
            "For benchmarks: accept TOKEN as an access token of PROJECT, never expiring, without a token exchange (h2load cannot run OAuth). Repeatable.",
            valueName: "project=token"
        )
    )
    var staticAccessTokens: [String] = []

    @Option(name: .customLong("token-lifetime"), help: "expires_in of issued access tokens, in seconds.")
    var tokenLifetime: Int = 3599

    @Option(name: .customLong("unregistered"), help: "Answer 404 UNREGISTERED for this token. Repeatable.")
    var unregistered: [String] = []

    @Option(name: .customLong("invalid"), help: "Answer 400 INVALID_ARGUMENT as Google does today (no BadRequest) for this token. Repeatable.")
    var invalid: [String] = []

    @Option(name: .customLong("sender-mismatch"), help: "Answer 403 SENDER_ID_MISMATCH for this token. Repeatable.")
    var senderMismatch: [String] = []

    @Option(name: .customLong("disabled-project"), help: "Answer 403 without FcmError for this project. Repeatable.")
    var disabledProjects: [String] = []

    @Option(name: .customLong("quota-exceeded"), help: "Share (0...1) of messages answered 429 QUOTA_EXCEEDED.")
    var quotaExceeded: Double = 0

    @Option(name: .customLong("internal-error"), help: "Share (0...1) of messages answered 500 INTERNAL.")
    var internalError: Double = 0

    @Option(name: .customLong("unavailable"), help: "Share (0...1) of messages answered 503 UNAVAILABLE.")
    var unavailable: Double = 0

    @Option(name: .customLong("retry-after"), help: "Retry-After seconds on 429 and 503 answers.")
    var retryAfter: Int?

    @Option(name: .customLong("latency-ms"), help: "Milliseconds before each message is answered.")
    var latencyMilliseconds: Int?

    @Option(name: .customLong("goaway-after"), help: "Send GOAWAY after this many messages per connection.")
    var goAwayAfter: Int?

    @Option(help: "Seed of the fault draws.")
    var seed: UInt64?

    func run() async throws {
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        let logger = Logger(label: "mock-fcm")
        var accounts = try serviceAccounts.map(Self.trustedAccount(path:))
        var generated: [(account: MockFCMServiceAccount, keyPEM: String, path: String)] = []
        for entry in writtenAccounts {
            let parts = entry.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { throw ValidationError("--write-service-account takes project=path") }
            let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
            let account = MockFCMServiceAccount(
                projectID: String(parts[0]),
                clientEmail: "herald@\(parts[0]).iam.gserviceaccount.com",
                publicKey: key.publicKey
            )
            accounts.append(account)
            generated.append((account, key.pkcs8PEMRepresentation, String(parts[1])))
        }
        var configuration = MockFCMConfiguration(
            host: host,
            port: port,
            caCertificatePath: caOut,
            serviceAccounts: accounts,
            accessTokenLifetimeSeconds: tokenLifetime,
            faults: MockFCMFaults(
                quotaExceededFraction: quotaExceeded,
                internalErrorFraction: internalError,
                unavailableFraction: unavailable,
                retryAfterSeconds: retryAfter,
                latency: latencyMilliseconds.map { .milliseconds($0) },
                goAwayAfterRequests: goAwayAfter,
                seed: seed
            )
        )
        configuration.unregisteredTokens = Set(unregistered)
        configuration.invalidTokens = Set(invalid)
        configuration.senderMismatchTokens = Set(senderMismatch)
        configuration.disabledProjects = Set(disabledProjects)
        for entry in staticAccessTokens {
            let parts = entry.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, !parts[1].isEmpty else { throw ValidationError("--static-access-token takes project=token") }
            configuration.staticAccessTokens[String(parts[1])] = String(parts[0])
        }
        let server = MockFCMServer(configuration: configuration, logger: logger)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: server)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            let boundPort = try await server.listeningPort()
            for entry in generated {
                let file: [String: String] = [
                    "type": "service_account", "project_id": entry.account.projectID, "private_key_id": "mock-\(entry.account.projectID)",
                    "private_key": entry.keyPEM, "client_email": entry.account.clientEmail,
                    "token_uri": "https://\(host.contains(":") ? "[\(host)]" : host):\(boundPort)/token",
                ]
                let data = try JSONSerialization.data(withJSONObject: file, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
                try data.write(to: URL(fileURLWithPath: entry.path), options: .atomic)
            }
            if let portFile { try Data("\(boundPort)\n".utf8).write(to: URL(fileURLWithPath: portFile), options: .atomic) }
            try await tasks.waitForAll()
        }
        let summary =
            "mock-fcm: delivered=\(server.totalDelivered) token_exchanges=\(server.tokenExchangeCount) statuses=\(server.statusCounts().sorted { $0.key < $1.key })\n"
        FileHandle.standardError.write(Data(summary.utf8))
    }

    /// The account of a key file: its project, client_email and the public half of private_key.
    static func trustedAccount(path: String) throws -> MockFCMServiceAccount {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        guard let file = try JSONSerialization.jsonObject(with: data) as? [String: Any], let project = file["project_id"] as? String,
            let email = file["client_email"] as? String, let pem = file["private_key"] as? String
        else { throw ValidationError("\(path) is not a service-account key file") }
        return MockFCMServiceAccount(projectID: project, clientEmail: email, publicKey: try _RSA.Signing.PrivateKey(pemRepresentation: pem).publicKey)
    }
}
