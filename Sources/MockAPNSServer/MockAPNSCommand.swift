import ArgumentParser
import Crypto
import Foundation
import Logging
import MockAPNS
import MockServerSupport
import ServiceLifecycle
import UnixSignals

/// `mock-apns`: runs ``MockAPNSServer`` as a process for the demo, the benchmark and scripts.
@main
struct MockAPNSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mock-apns",
        abstract: "An HTTP/2 + TLS server that answers like Apple's APNs provider API.",
        discussion: """
            At start-up it generates a self-signed CA and a server certificate (SANs: localhost, \
            127.0.0.1, ::1 and --host); clients must trust the CA written by --ca-out. Without \
            --provider-key it runs in certificate mode and does not check `authorization`. \
            SIGTERM or SIGINT stops it gracefully; it then prints a one-line summary of its \
            counters to stderr. Fault options (--too-many-requests, --internal-server-error, \
            --service-unavailable, --latency, --goaway-after, --one-stream-until-success) are off \
            by default; a faulted request never counts as accepted.
            """
    )

    @Option(help: "Address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "Port to listen on; 0 picks an ephemeral port (see --port-file).")
    var port: Int = 0

    @Option(
        name: .customLong("port-file"),
        help: ArgumentHelp("Write the bound port (decimal) to this file once listening.", valueName: "path")
    )
    var portFile: String?

    @Option(
        name: .customLong("ca-out"),
        help: ArgumentHelp(
            "Write the generated CA certificate (PEM) here; parent directories are created.",
            valueName: "path"
        )
    )
    var caOut: String?

    @Option(
        name: .customLong("provider-key"),
        help: ArgumentHelp(
            """
            Accept ES256 provider tokens with this key id; PATH is a PEM P-256 public key or a .p8 \
            (PKCS#8) private key. Repeatable.
            """,
            valueName: "key-id=path"
        )
    )
    var providerKeys: [String] = []

    @Option(name: .customLong("team-id"), help: "Require provider tokens to carry this team id as `iss`.")
    var teamID: String?

    @Option(
        name: .customLong("unregistered"),
        help: ArgumentHelp(
            """
            Answer 410 Unregistered for this hex device token, with MILLIS (ms since 1970; default: \
            now) as timestamp. Repeatable.
            """,
            valueName: "token[:millis]"
        )
    )
    var unregisteredTokens: [String] = []

    @Option(name: .customLong("max-concurrent-streams"), help: "SETTINGS_MAX_CONCURRENT_STREAMS to advertise.")
    var maxConcurrentStreams: Int = 1000

    @Option(
        name: .customLong("client-ca"),
        help: ArgumentHelp(
            """
            Require a TLS client certificate issued by a CA in this PEM file (certificate \
            authentication, mutual TLS); the handshake fails without one.
            """,
            valueName: "path"
        )
    )
    var clientCA: String?

    @Option(
        name: .customLong("too-many-requests"),
        help: ArgumentHelp("Fault: answer this share (0...1) of requests 429 TooManyRequests.", valueName: "fraction")
    )
    var tooManyRequestsFraction: Double = 0

    @Option(
        name: .customLong("internal-server-error"),
        help: ArgumentHelp("Fault: answer this share (0...1) of requests 500 InternalServerError.", valueName: "fraction")
    )
    var internalServerErrorFraction: Double = 0

    @Option(
        name: .customLong("service-unavailable"),
        help: ArgumentHelp("Fault: answer this share (0...1) of requests 503 ServiceUnavailable.", valueName: "fraction")
    )
    var serviceUnavailableFraction: Double = 0

    @Option(
        name: .customLong("latency"),
        help: ArgumentHelp(
            """
            Fault: delay processing and answering by MS milliseconds, or by a uniform draw from \
            MIN-MAX. A request whose stream the client resets meanwhile is never processed.
            """,
            valueName: "ms|min-max"
        )
    )
    var latency: String?

    @Option(
        name: .customLong("latency-scope"),
        help: ArgumentHelp(
            """
            Which requests --latency delays: `every` request, `first-per-token` (only the first \
            request for each device token, so a retry is fast) or a share such as `0.25`.
            """,
            valueName: "scope"
        )
    )
    var latencyScope: String = "every"

    @Option(
        name: .customLong("goaway-after"),
        help: ArgumentHelp(
            """
            Fault: after N requests on a connection send GOAWAY (last-stream-id = the Nth stream, \
            reason Shutdown), answer the streams up to it, ignore those above and close.
            """,
            valueName: "n"
        )
    )
    var goAwayAfter: Int?

    @Flag(
        name: .customLong("one-stream-until-success"),
        help: """
            Apple's rule for token authentication: advertise SETTINGS_MAX_CONCURRENT_STREAMS 1 \
            and raise it to --max-concurrent-streams after the first 200 on the connection.
            """
    )
    var oneStreamUntilSuccess = false

    @Flag(
        name: .customLong("unique-ids"),
        help: "Answer with apns-unique-id, as Apple's development (sandbox) environment does."
    )
    var uniqueIDs = false

    @Option(name: .customLong("max-channels"), help: "Broadcast channels one app may create (Apple: 10000).")
    var maxChannels = 10_000

    @Option(name: .customLong("seed"), help: "Seed for the fault draws, for reproducible runs (default: random).")
    var seed: UInt64?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "info"

    func validate() throws {
        guard Logger.Level(rawValue: self.logLevel) != nil else {
            throw ValidationError(
                "--log-level must be one of trace, debug, info, notice, warning, error, critical"
            )
        }
        guard (0...65_535).contains(self.port) else { throw ValidationError("--port must be 0...65535") }
        guard self.maxConcurrentStreams > 0 else { throw ValidationError("--max-concurrent-streams must be positive") }
        let fractions = [
            ("--too-many-requests", self.tooManyRequestsFraction),
            ("--internal-server-error", self.internalServerErrorFraction),
            ("--service-unavailable", self.serviceUnavailableFraction),
        ]
        for (flag, fraction) in fractions where !(0...1).contains(fraction) {
            throw ValidationError("\(flag) must be between 0 and 1")
        }
        guard fractions.map(\.1).reduce(0, +) <= 1 else {
            throw ValidationError("the fault fractions must add up to at most 1")
        }
        if let goAwayAfter = self.goAwayAfter, goAwayAfter < 1 {
            throw ValidationError("--goaway-after must be at least 1")
        }
        _ = try self.parseLatency()
    }

    /// `--latency` and `--latency-scope` as a fault, or nil without `--latency`.
    private func parseLatency() throws -> MockAPNSFaults.Latency? {
        guard let text = self.latency else { return nil }
        let bounds = text.split(separator: "-", omittingEmptySubsequences: false).map { Int($0) }
        guard (1...2).contains(bounds.count), let minimum = bounds.first ?? nil, let maximum = bounds.last ?? nil,
            minimum >= 0, maximum >= minimum
        else {
            throw ValidationError("--latency expects MS or MIN-MAX in milliseconds, got '\(text)'")
        }
        let scope: MockAPNSFaults.Latency.Scope
        switch self.latencyScope {
        case "every": scope = .everyRequest
        case "first-per-token": scope = .firstRequestPerToken
        default:
            guard let share = Double(self.latencyScope), (0...1).contains(share) else {
                throw ValidationError("--latency-scope must be every, first-per-token or a share in 0...1")
            }
            scope = .fraction(share)
        }
        return MockAPNSFaults.Latency(.milliseconds(minimum) ... .milliseconds(maximum), scope: scope)
    }

    func run() async throws {
        let level = Logger.Level(rawValue: self.logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "mock-apns")

        var configuration = MockAPNSConfiguration(
            host: self.host,
            port: self.port,
            caCertificatePath: self.caOut,
            providerKeys: try self.parseProviderKeys(),
            teamID: self.teamID,
            unregisteredTokens: try self.parseUnregisteredTokens(),
            maxConcurrentStreams: self.maxConcurrentStreams,
            // Nothing reads the request log of a standalone server: keep long runs lean.
            requestLogLimit: 0,
            faults: MockAPNSFaults(
                tooManyRequestsFraction: self.tooManyRequestsFraction,
                internalServerErrorFraction: self.internalServerErrorFraction,
                serviceUnavailableFraction: self.serviceUnavailableFraction,
                latency: try self.parseLatency(),
                goAwayAfterRequests: self.goAwayAfter,
                oneStreamUntilFirstSuccess: self.oneStreamUntilSuccess,
                seed: self.seed
            ),
            clientCertificateAuthorityPath: self.clientCA
        )
        configuration.returnsUniqueIDs = self.uniqueIDs
        configuration.maximumChannelsPerApp = self.maxChannels
        let server = MockAPNSServer(configuration: configuration, logger: logger)

        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: server)]
        if let portFile = self.portFile {
            services.append(
                .init(
                    service: PortFileWriter(server: server, path: portFile),
                    successTerminationBehavior: .ignore
                )
            )
        }
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: services,
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        defer { Self.printSummary(of: server) }
        try await group.run()
    }

    private static func printSummary(of server: MockAPNSServer) {
        let statuses = server.statusCounts()
            .sorted { $0.key < $1.key }
            .map { "\($0.key):\($0.value)" }
            .joined(separator: ",")
        let streams = server.streamStatistics()
        let line = """
            mock-apns: accepted=\(server.totalAcceptedPushes) \
            repeated_apns_id=\(server.repeatedAPNSIDCount) \
            statuses=\(statuses.isEmpty ? "none" : statuses) \
            goaways=\(streams.goAwaysSent) unanswered=\(streams.unansweredRequests)

            """
        FileHandle.standardError.write(Data(line.utf8))
    }

    private func parseProviderKeys() throws -> [String: P256.Signing.PublicKey] {
        var keys: [String: P256.Signing.PublicKey] = [:]
        for argument in self.providerKeys {
            guard let separator = argument.firstIndex(of: "="),
                separator != argument.startIndex,
                argument.index(after: separator) != argument.endIndex
            else { throw ValidationError("--provider-key expects KEYID=PATH, got '\(argument)'") }
            let keyID = String(argument[..<separator])
            let path = String(argument[argument.index(after: separator)...])
            let pem: String
            do {
                pem = try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw ValidationError("--provider-key \(keyID): cannot read \(path): \(error)")
            }
            if let publicKey = try? P256.Signing.PublicKey(pemRepresentation: pem) {
                keys[keyID] = publicKey
            } else if let privateKey = try? P256.Signing.PrivateKey(pemRepresentation: pem) {
                keys[keyID] = privateKey.publicKey
            } else {
                throw ValidationError(
                    "--provider-key \(keyID): \(path) is neither a PEM P-256 public key nor a PKCS#8 private key"
                )
            }
        }
        return keys
    }

    private func parseUnregisteredTokens() throws -> [String: Int64] {
        let now = MockWallClock.millisecondsSince1970()
        var tokens: [String: Int64] = [:]
        for argument in self.unregisteredTokens {
            let parts = argument.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            let token = parts[0].lowercased()
            guard !token.isEmpty, token.count % 2 == 0, token.allSatisfy(\.isHexDigit) else {
                throw ValidationError("--unregistered expects an even-length hex token, got '\(parts[0])'")
            }
            var millis = now
            if parts.count == 2 {
                guard let given = Int64(parts[1]), given >= 0 else {
                    throw ValidationError("--unregistered \(token): MILLIS must be a non-negative integer")
                }
                millis = given
            }
            tokens[token] = millis
        }
        return tokens
    }
}

/// Writes the server's bound port to a file once it listens, so scripts can find it.
struct PortFileWriter: Service {
    let server: MockAPNSServer
    let path: String

    func run() async throws {
        let port = try await self.server.listeningPort()
        let url = URL(fileURLWithPath: self.path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("\(port)\n".utf8).write(to: url, options: .atomic)
    }
}
