import ArgumentParser
import Foundation
import Logging
import MockWebPush
import ServiceLifecycle
import UnixSignals

/// `mock-webpush`: runs ``MockWebPushServer`` as a process for the demo, the benchmark and scripts.
@main
struct MockWebPushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mock-webpush",
        abstract: "A mock Web Push service (HTTP/2 + TLS, several origins) that decrypts what it receives.",
        discussion: """
            Each --port is an origin of its own, https://HOST:PORT. At start-up it generates a \
            self-signed CA and a server certificate; clients must trust the CA written by \
            --ca-out. POST /subscribe (optionally ?applicationServerKey=<base64url>) on an origin \
            answers 201 with a subscription there ({"endpoint":...,"keys":{"p256dh":...,"auth":...}}); \
            POST /push/<id> is its push endpoint, which checks VAPID, the headers and the \
            encryption; GET /stats gives the counters. SIGTERM or SIGINT stops it; it then prints a \
            one-line summary to stderr.
            """
    )

    @Option(help: "Address to listen on.")
    var host: String = "127.0.0.1"

    @Option(name: .customLong("port"), help: "Port of one origin; 0 picks an ephemeral one. Repeatable.")
    var ports: [Int] = [8451, 8452]

    @Option(name: .customLong("ca-out"), help: ArgumentHelp("Write the generated CA certificate (PEM) here.", valueName: "path"))
    var caOut: String?

    @Option(name: .customLong("origins-file"), help: ArgumentHelp("Write the origins here, one a line, once listening.", valueName: "path"))
    var originsFile: String?

    @Option(help: "Seed of the subscriptions' ids and keys and of the message ids.")
    var seed: UInt64?

    @Option(name: .customLong("answer-delay-ms"), help: "Milliseconds before each request is answered.")
    var answerDelayMilliseconds: Int = 0

    @Flag(
        name: .customLong("no-cryptography"),
        help: "Neither decrypt messages nor verify VAPID signatures (a benchmark beside Herald on one machine: a real push service does that on its own)."
    )
    var noCryptography = false

    func run() async throws {
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        let logger = Logger(label: "mock-webpush")
        var configuration = MockWebPushConfiguration(
            host: host,
            ports: ports,
            caCertificatePath: caOut,
            seed: seed,
            answerDelayMilliseconds: answerDelayMilliseconds
        )
        configuration.checksCryptography = !noCryptography
        let server = MockWebPushServer(configuration: configuration, logger: logger)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: server)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            // Written unbuffered: a script reading stdout through a pipe sees the origins now.
            let origins = try await server.origins()
            let lines = Data(origins.map { $0 + "\n" }.joined().utf8)
            FileHandle.standardOutput.write(lines)
            if let originsFile { try lines.write(to: URL(fileURLWithPath: originsFile), options: .atomic) }
            try await tasks.waitForAll()
        }
        let stats = server.stats
        let statuses = stats.answersByStatus.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",")
        let connections = stats.connectionsByOrigin.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        let summary = "mock-webpush: requests=\(stats.requests) delivered=\(stats.deliveries) statuses=\(statuses) connections=\(connections)\n"
        FileHandle.standardError.write(Data(summary.utf8))
    }
}
