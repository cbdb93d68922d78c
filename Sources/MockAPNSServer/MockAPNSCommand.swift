import ArgumentParser
import Crypto
import Foundation
import Logging
import MockAPNS
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
            counters to stderr.
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
    }

    func run() async throws {
        let level = Logger.Level(rawValue: self.logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "mock-apns")

        let configuration = MockAPNSConfiguration(
            host: self.host,
            port: self.port,
            caCertificatePath: self.caOut,
            providerKeys: try self.parseProviderKeys(),
            teamID: self.teamID,
            unregisteredTokens: try self.parseUnregisteredTokens(),
            maxConcurrentStreams: self.maxConcurrentStreams,
            // Nothing reads the request log of a standalone server: keep long runs lean.
            requestLogLimit: 0
        )
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
        let line = """
            mock-apns: accepted=\(server.totalAcceptedPushes) \
            repeated_apns_id=\(server.repeatedAPNSIDCount) \
            statuses=\(statuses.isEmpty ? "none" : statuses)

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
        let now = Int64(Date().timeIntervalSince1970 * 1000)
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
