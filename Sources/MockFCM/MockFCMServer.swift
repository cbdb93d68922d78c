import Crypto
import Foundation
import JSONCore
public import Logging
import MockAPNS
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
public import ServiceLifecycle
import SwiftASN1
import Synchronization
import X509

/// An HTTP/2 + TLS server that answers like FCM's HTTP v1 API and Google's OAuth token endpoint.
///
/// `POST /token` verifies a service account's RS256 assertion and issues an expiring access
/// token; `POST /v1/projects/{project}/messages:send` checks the bearer token and the message and
/// answers with FCM's bodies, each beside the page or SDK file that shows Google answering so
/// (MockFCMServer+Answer.swift, MockFCMAnswer.swift); any other path gets Google's HTML 404.
/// `run()` generates a throw-away CA and server certificate, binds, and serves until cancelled
/// or gracefully shut down. The counters can be read at any time from any thread.
public final class MockFCMServer: Service, Sendable {
    /// One request the send endpoint answered.
    public struct ReceivedMessage: Sendable {
        /// The request's path.
        public var path: String
        /// The registration token or FID the message named (nil when it named none).
        public var target: String?
        public var status: Int
        /// The FcmError code or canonical status of an error answer; nil for 200.
        public var reason: String?
        /// The request body as received.
        public var body: [UInt8]
    }

    let configuration: MockFCMConfiguration
    let logger: Logger
    let ledger: Mutex<Ledger>
    private let lifecycle = Mutex(Lifecycle.idle(waiters: []))
    private let openConnections = Mutex<[ObjectIdentifier: any Channel]?>([:])

    /// Creates a server; nothing happens until ``run()``.
    public init(configuration: MockFCMConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        var ledger = Ledger(
            unregisteredTokens: configuration.unregisteredTokens,
            faults: configuration.faults,
            generator: SeededRandomNumberGenerator(seed: configuration.faults.seed ?? UInt64.random(in: .min ... .max)),
            logLimit: max(0, configuration.requestLogLimit)
        )
        for (token, projectID) in configuration.staticAccessTokens { ledger.accessTokens[token] = (projectID, .max, nil) }
        self.ledger = Mutex(ledger)
    }

    // MARK: Running

    /// Binds, serves until cancelled or gracefully shut down, then closes every connection.
    public func run() async throws {
        try lifecycle.withLock { state in
            guard case .idle(let waiters) = state else { throw MockFCMServerError.alreadyStarted }
            state = .starting(waiters: waiters)
        }
        let serverChannel: any Channel
        do {
            serverChannel = try await bind()
        } catch {
            logger.error("mock FCM failed to start", metadata: ["error": "\(error)"])
            finish(.failed(error))
            throw error
        }
        let port = serverChannel.localAddress?.port ?? configuration.port
        finish(.listening(port: port))
        logger.info("mock FCM listening", metadata: ["mock_fcm.host": "\(configuration.host)", "mock_fcm.port": "\(port)"])

        await withTaskCancellationOrGracefulShutdownHandler {
            try? await serverChannel.closeFuture.get()
        } onCancelOrGracefulShutdown: {
            serverChannel.close(promise: nil)
        }
        let connections = openConnections.withLock { open in
            defer { open = nil }
            return Array((open ?? [:]).values)
        }
        for connection in connections { connection.close(promise: nil) }
        for connection in connections { try? await connection.closeFuture.get() }
        finish(.stopped)
        logger.info("mock FCM stopped", metadata: ["mock_fcm.delivered": "\(totalDelivered)"])
    }

    /// The bound port; waits until ``run()`` has bound it. Throws when `run()` failed or stopped.
    public func listeningPort() async throws -> Int {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Int, any Error>) in
            let result = lifecycle.withLock { state -> Result<Int, any Error>? in
                switch state {
                case .idle(let waiters):
                    state = .idle(waiters: waiters + [continuation])
                    return nil
                case .starting(let waiters):
                    state = .starting(waiters: waiters + [continuation])
                    return nil
                case .listening(let port): return .success(port)
                case .failed(let error): return .failure(error)
                case .stopped: return .failure(MockFCMServerError.stopped)
                }
            }
            if let result { continuation.resume(with: result) }
        }
    }

    private func finish(_ newState: Lifecycle) {
        let waiters = lifecycle.withLock { state -> [CheckedContinuation<Int, any Error>] in
            defer { state = newState }
            switch state {
            case .idle(let waiters), .starting(let waiters): return waiters
            default: return []
            }
        }
        let result: Result<Int, any Error> =
            switch newState {
            case .listening(let port): .success(port)
            case .failed(let error): .failure(error)
            default: .failure(MockFCMServerError.stopped)
            }
        for waiter in waiters { waiter.resume(with: result) }
    }

    private func bind() async throws -> any Channel {
        let authority = try CertificateAuthority(commonName: "Herald Mock FCM CA")
        let server = try authority.issue(commonName: "localhost", usage: .serverAuth, alternativeNames: Self.alternativeNames(configuration.host))
        if let path = configuration.caCertificatePath {
            let url = URL(fileURLWithPath: path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(try authority.pem.utf8).write(to: url, options: .atomic)
        }
        var serializer = DER.Serializer()
        try serializer.serialize(server.certificate)
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: serializer.serializedBytes, format: .der))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(server.privateKey.derRepresentation), format: .der))
        )
        tls.applicationProtocols = ["h2"]
        tls.minimumTLSVersion = .tlsv12
        let sslContext = try NIOSSLContext(configuration: tls)
        return try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try self.configureConnection(channel, sslContext: sslContext) }
            }
            .bind(host: configuration.host, port: configuration.port)
            .get()
    }

    /// TLS, HTTP/2 and the connection's request handler on an accepted connection (on its event loop).
    private func configureConnection(_ channel: any Channel, sslContext: NIOSSLContext) throws {
        let tracked = openConnections.withLock { open -> Bool in
            guard open != nil else { return false }
            open?[ObjectIdentifier(channel)] = channel
            return true
        }
        guard tracked else {
            channel.close(promise: nil)
            return
        }
        channel.closeFuture.whenComplete { _ in
            self.openConnections.withLock { _ = $0?.removeValue(forKey: ObjectIdentifier(channel)) }
        }
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(NIOSSLServerHandler(context: sslContext))
        try pipeline.addHandler(NIOHTTP2Handler(mode: .server))
        try pipeline.addHandler(MockFCMConnectionHandler(server: self, goAwayAfter: ledger.withLock { $0.faults.goAwayAfterRequests }))
    }

    private static func alternativeNames(_ host: String) -> [GeneralName] {
        var names: [GeneralName] = [
            .dnsName("localhost"),
            .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
            .ipAddress(ASN1OctetString(contentBytes: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
        ]
        let octets = host.split(separator: ".").compactMap { UInt8($0) }
        if octets.count == 4, host.split(separator: ".").count == 4 {
            if octets != [127, 0, 0, 1] { names.append(.ipAddress(ASN1OctetString(contentBytes: octets[...]))) }
        } else if !host.isEmpty, host != "localhost", !host.contains(":") {
            names.append(.dnsName(host))
        }
        return names
    }

    /// Decides the answer to one complete request and counts it.
    func answer(method: String, path: String, authority: String?, authorization: String?, metadataFlavor: String? = nil, body: [UInt8]) -> MockFCMAnswer {
        let sendPrefix = "/v1/projects/"
        let sendSuffix = "/messages:send"
        var answer: MockFCMAnswer
        var logged: ReceivedMessage?
        if method == "POST", path == Self.tokenPath {
            answer = tokenAnswer(body: body, authority: authority)
        } else if method == "GET", path == Self.metadataTokenPath {
            answer = metadataTokenAnswer(metadataFlavor: metadataFlavor)
        } else if method == "POST", path.hasPrefix(sendPrefix), path.hasSuffix(sendSuffix),
            case let project = path.dropFirst(sendPrefix.count).dropLast(sendSuffix.count), !project.isEmpty, !project.contains("/")
        {
            let document = try? JSONValue(parsing: body)
            answer = sendAnswer(projectID: String(project), authorization: authorization, document: document)
            let message = document?["message"]
            let target = message?["token"]?.stringValue ?? message?["fid"]?.stringValue
            logged = ReceivedMessage(path: path, target: target, status: answer.status, reason: answer.reason, body: body)
        } else {
            answer = .htmlNotFound
        }
        ledger.withLock { ledger in
            ledger.countsByStatus[answer.status, default: 0] += 1
            if let logged { ledger.record(logged) }
        }
        logger.trace("mock FCM answered", metadata: ["mock_fcm.path": "\(path)", "mock_fcm.status": "\(answer.status)"])
        return answer
    }

    enum Lifecycle {
        case idle(waiters: [CheckedContinuation<Int, any Error>])
        case starting(waiters: [CheckedContinuation<Int, any Error>])
        case listening(port: Int)
        case failed(any Error)
        case stopped
    }
}
