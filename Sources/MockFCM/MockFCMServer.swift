import JSONCore
public import Logging
import MockServerSupport
import NIOCore
import NIOHTTP2
import NIOSSL
public import ServiceLifecycle
import Synchronization

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
    private let listener = MockListener(alreadyStarted: MockFCMServerError.alreadyStarted, stopped: MockFCMServerError.stopped)

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
        let channels: [any Channel]
        do {
            channels = try await listener.bind(
                host: configuration.host,
                ports: [configuration.port],
                authorityName: "Herald Mock FCM CA",
                caCertificatePath: configuration.caCertificatePath,
                configureConnection: { channel, sslContext in
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addHandler(NIOSSLServerHandler(context: sslContext))
                    try pipeline.addHandler(NIOHTTP2Handler(mode: .server))
                    let goAwayAfter = self.ledger.withLock { $0.faults.goAwayAfterRequests }
                    try pipeline.addHandler(MockFCMConnectionHandler(server: self, goAwayAfter: goAwayAfter))
                }
            )
        } catch {
            logger.error("mock FCM failed to start", metadata: ["error": "\(error)"])
            throw error
        }
        let port = listener.boundPorts?.first ?? configuration.port
        logger.info("mock FCM listening", metadata: ["mock_fcm.host": "\(configuration.host)", "mock_fcm.port": "\(port)"])
        await listener.serveUntilStopped(channels)
        logger.info("mock FCM stopped", metadata: ["mock_fcm.delivered": "\(totalDelivered)"])
    }

    /// The bound port; waits until ``run()`` has bound it. Throws when `run()` failed or stopped.
    public func listeningPort() async throws -> Int {
        try await listener.listeningPorts()[0]
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
}
