import APNSCore
import PushCore
import Crypto
import Foundation
import Logging
import MockAPNS
import MockServerSupport
import NIOCore
import NIOPosix
import ServiceLifecycle
import Testing

@testable import APNSHTTP2

/// The client against the project's mock APNs over real TLS and HTTP/2 on loopback. About 500
/// lines: every client behaviour that needs a real peer (authentication kinds, pools, GOAWAY,
/// deadlines, credential replacement) shares the mock's set-up here.
@Suite("APNSHTTP2Client against MockAPNS", .timeLimit(.minutes(2)))
struct MockAPNSIntegrationTests {
    static let keyID = "KEY1234567"
    static let teamID = "TEAM123456"
    static let signingKey = P256.Signing.PrivateKey()
    static let credentials = ProviderTokenCredentials(keyID: keyID, teamID: teamID, privateKey: signingKey)
    static let quietLogger = Logger(label: "apns-test", factory: { _ in SwiftLogNoOpLogHandler() })

    struct Fixture: Sendable {
        var server: MockAPNSServer
        var client: APNSHTTP2Client
        var port: Int
        var caPath: String
    }

    /// Runs a mock (token mode) and a client pointed at it, then `body`; cancels both afterwards.
    static func withMockAndClient(
        maxConcurrentStreams: Int = 1000,
        unregisteredTokens: [String: Int64] = [:],
        connectionsPerEndpoint: Int = 2,
        authentication: APNSClientConfiguration.Authentication = .token(credentials),
        makeTokenSource: (@Sendable () -> any APNSProviderTokenSource)? = nil,
        host: String = "127.0.0.1",
        trustMockCA: Bool = true,
        wallClockMilliseconds: @escaping @Sendable () -> Int64 = MockWallClock.millisecondsSince1970,
        _ body: @Sendable (Fixture) async throws -> Void
    ) async throws {
        let caPath = FileManager.default.temporaryDirectory
            .appendingPathComponent("apns-http2-tests-\(UUID().uuidString).pem").path
        defer { try? FileManager.default.removeItem(atPath: caPath) }
        var configuration = MockAPNSConfiguration(
            caCertificatePath: caPath,
            providerKeys: [keyID: signingKey.publicKey],
            teamID: teamID,
            unregisteredTokens: unregisteredTokens,
            maxConcurrentStreams: maxConcurrentStreams
        )
        configuration.wallClockMilliseconds = wallClockMilliseconds
        let server = MockAPNSServer(configuration: configuration, logger: quietLogger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            let port = try await server.listeningPort()
            let endpoint = try APNSClientConfiguration.Endpoint(url: "https://\(host):\(port)")
            let configuration = APNSClientConfiguration(
                authentication: authentication,
                production: endpoint,
                sandbox: endpoint,
                additionalTrustRootsPEMPath: trustMockCA ? caPath : nil,
                connectionsPerEndpoint: connectionsPerEndpoint
            )
            let client: APNSHTTP2Client
            if let makeTokenSource {
                client = try APNSHTTP2Client(
                    configuration: configuration,
                    eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
                    logger: quietLogger,
                    makeTokenSource: makeTokenSource
                )
            } else {
                client = try APNSHTTP2Client(configuration: configuration, logger: quietLogger)
            }
            group.addTask { try await client.run() }
            do {
                try await body(Fixture(server: server, client: client, port: port, caPath: caPath))
            } catch {
                group.cancelAll()
                throw error
            }
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    static func request(
        token: String = "a1b2c3d4e5f60718",
        apnsID: String = UUID().uuidString.lowercased(),
        payload: String = #"{"aps":{"alert":{"title":"Shipped","body":"On its way"}}}"#
    ) -> APNSRequest {
        APNSRequest(
            deviceToken: token,
            topic: "com.example.shop",
            pushType: .alert,
            priority: .immediate,
            apnsID: apnsID,
            expiration: 1_767_225_600,
            collapseID: "order-42",
            payload: Array(payload.utf8)
        )
    }

    static func deadline(_ seconds: Int = 10) -> ContinuousClock.Instant {
        .now + .seconds(seconds)
    }

    @Test func successfulPushEchoesTheAPNSID() async throws {
        try await Self.withMockAndClient { fixture in
            let request = Self.request()
            let response = try await fixture.client.send(request, environment: .production, deadline: Self.deadline())
            #expect(response == APNSResponse(status: 200, apnsID: request.apnsID))
            #expect(fixture.server.pushCount(token: request.deviceToken) == 1)

            let received = try #require(fixture.server.receivedRequests().last)
            #expect(received.header(":path") == "/3/device/a1b2c3d4e5f60718")
            #expect(received.header(":authority") == "127.0.0.1:\(fixture.port)")
            #expect(received.header("apns-topic") == "com.example.shop")
            #expect(received.header("apns-push-type") == "alert")
            #expect(received.header("apns-priority") == "10")
            #expect(received.header("apns-expiration") == "1767225600")
            #expect(received.header("apns-collapse-id") == "order-42")
            #expect(received.header("authorization")?.hasPrefix("bearer ey") == true)
            #expect(received.payload == request.payload)

            // The sandbox environment has its own connections and works too.
            let sandbox = try await fixture.client.send(
                Self.request(),
                environment: .sandbox,
                deadline: Self.deadline()
            )
            #expect(sandbox.status == 200)
        }
    }

    @Test func hostNameEndpointSendsSNIAndVerifiesTheCertificate() async throws {
        try await Self.withMockAndClient(host: "localhost") { fixture in
            let response = try await fixture.client.send(
                Self.request(),
                environment: .production,
                deadline: Self.deadline()
            )
            #expect(response.status == 200)
            #expect(fixture.server.receivedRequests().last?.header(":authority") == "localhost:\(fixture.port)")
        }
    }

    @Test func untrustedServerCertificateFailsTheConnection() async throws {
        try await Self.withMockAndClient(trustMockCA: false) { fixture in
            let started = ContinuousClock.now
            do {
                _ = try await fixture.client.send(Self.request(), environment: .production, deadline: Self.deadline())
                Issue.record("a certificate from an unknown CA must be refused")
            } catch let error as TransportError {
                #expect(error.resultReason == "TLSHandshakeFailed", "\(error)")
                #expect(error.isConnectionFailure)
            }
            #expect(started.duration(to: .now) < .seconds(15))
            #expect(fixture.server.statusCounts().isEmpty)
        }
    }

    @Test func unregisteredTokenReturns410WithTimestamp() async throws {
        let token = "00ff00ff00ff00ff"
        try await Self.withMockAndClient(unregisteredTokens: [token: 1_700_000_000_123]) { fixture in
            let request = Self.request(token: token)
            let response = try await fixture.client.send(request, environment: .production, deadline: Self.deadline())
            #expect(
                response
                    == APNSResponse(
                        status: 410,
                        apnsID: request.apnsID,
                        reason: .unregistered,
                        timestampMilliseconds: 1_700_000_000_123
                    )
            )
        }
    }

    @Test func rejectionsCarryTheirReasons() async throws {
        try await Self.withMockAndClient { fixture in
            let tooLarge = Self.request(payload: #"{"aps":{"alert":""# + String(repeating: "x", count: 5000) + #""}}"#)
            let large = try await fixture.client.send(tooLarge, environment: .production, deadline: Self.deadline())
            #expect(large.status == 413)
            #expect(large.reason == .payloadTooLarge)

            let badToken = try await fixture.client.send(
                Self.request(token: "not-hex"),
                environment: .production,
                deadline: Self.deadline()
            )
            #expect(badToken.status == 400)
            #expect(badToken.reason == .badDeviceToken)
        }
    }

    @Test func unknownSigningKeyIs403InvalidProviderToken() async throws {
        let stranger = ProviderTokenCredentials(
            keyID: "OTHERKEY12",
            teamID: Self.teamID,
            privateKey: P256.Signing.PrivateKey()
        )
        try await Self.withMockAndClient(authentication: .token(stranger)) { fixture in
            let response = try await fixture.client.send(
                Self.request(),
                environment: .production,
                deadline: Self.deadline()
            )
            #expect(response.status == 403)
            #expect(response.reason == .invalidProviderToken)
        }
    }

    /// A token source whose first token is older than an hour: APNs answers ExpiredProviderToken,
    /// the client asks for a replacement and retries once inside `send`.
    actor ScriptedTokenSource: APNSProviderTokenSource {
        private var tokens: [String]
        private var retired: Set<String> = []
        private(set) var replacements = 0

        init(tokens: [String]) {
            self.tokens = tokens
        }

        func currentToken() -> String { tokens[0] }

        /// Like the real manager: a token already replaced is answered "send again" (with the
        /// current one), without another replacement.
        func replaceExpired(_ token: String) -> Bool {
            guard token == tokens[0] else { return retired.contains(token) }
            guard tokens.count > 1 else { return false }
            retired.insert(tokens.removeFirst())
            replacements += 1
            return true
        }
    }

    @Test func expiredProviderTokenIsReplacedAndRetriedOnce() async throws {
        let now = Int64(Date().timeIntervalSince1970)
        let expired = try Self.credentials.signToken(issuedAt: now - 2 * 3600)
        let fresh = try Self.credentials.signToken(issuedAt: now)
        let source = ScriptedTokenSource(tokens: [expired, fresh])
        try await Self.withMockAndClient(connectionsPerEndpoint: 1, makeTokenSource: { source }) { fixture in
            let response = try await fixture.client.send(
                Self.request(),
                environment: .production,
                deadline: Self.deadline()
            )
            #expect(response.status == 200)
            #expect(await source.replacements == 1)
            #expect(fixture.server.statusCounts() == [403: 1, 200: 1])
        }
    }

    @Test func expiredProviderTokenWithoutReplacementIsReturned() async throws {
        let expired = try Self.credentials.signToken(issuedAt: Int64(Date().timeIntervalSince1970) - 2 * 3600)
        let source = ScriptedTokenSource(tokens: [expired])
        try await Self.withMockAndClient(connectionsPerEndpoint: 1, makeTokenSource: { source }) { fixture in
            let response = try await fixture.client.send(
                Self.request(),
                environment: .production,
                deadline: Self.deadline()
            )
            #expect(response.status == 403)
            #expect(response.reason == .expiredProviderToken)
            #expect(fixture.server.statusCounts() == [403: 1])
        }
    }

    @Test func thousandConcurrentSendsOverTwoConnectionsWithTenStreamsEach() async throws {
        try await Self.withMockAndClient(maxConcurrentStreams: 10, connectionsPerEndpoint: 2) { fixture in
            let client = fixture.client
            let statuses = try await withThrowingTaskGroup(of: Int.self, returning: [Int: Int].self) { group in
                for index in 0..<1000 {
                    group.addTask {
                        let token = String(format: "%016x", index)
                        let request = Self.request(token: token)
                        let response = try await client.send(
                            request,
                            environment: .production,
                            deadline: Self.deadline(60)
                        )
                        #expect(response.apnsID == request.apnsID)
                        return response.status
                    }
                }
                var counts: [Int: Int] = [:]
                for try await status in group { counts[status, default: 0] += 1 }
                return counts
            }
            #expect(statuses == [200: 1000])
            let snapshot = client.poolSnapshot(.production)
            #expect(snapshot.liveConnections == 2)
            #expect(snapshot.peakStreamsPerConnection == 10)
            #expect(fixture.server.totalAcceptedPushes == 1000)
            #expect(fixture.server.repeatedAPNSIDCount == 0)
        }
    }

    /// 2,600 error bodies on one connection add up to more than the 64 KiB receive window:
    /// without connection-level WINDOW_UPDATEs the answers would stall.
    @Test func manyErrorBodiesDoNotExhaustTheReceiveWindow() async throws {
        try await Self.withMockAndClient(connectionsPerEndpoint: 1) { fixture in
            let client = fixture.client
            // A first 200 lifts the one-stream limit of a new token-authenticated connection.
            _ = try await client.send(Self.request(), environment: .production, deadline: Self.deadline())
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<50 {
                    group.addTask {
                        for _ in 0..<52 {
                            let response = try await client.send(
                                Self.request(token: "bad-token-\(worker)"),
                                environment: .production,
                                deadline: Self.deadline(60)
                            )
                            #expect(response.reason == .badDeviceToken)
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(fixture.server.statusCounts() == [200: 1, 400: 2600])
        }
    }

    @Test func nearlyPastDeadlineThrowsDeadlineExceeded() async throws {
        try await Self.withMockAndClient { fixture in
            let started = ContinuousClock.now
            await #expect(throws: TransportError.self) {
                _ = try await fixture.client.send(
                    Self.request(),
                    environment: .production,
                    deadline: .now + .milliseconds(1)
                )
            }
            do {
                _ = try await fixture.client.send(
                    Self.request(),
                    environment: .production,
                    deadline: .now - .seconds(1)
                )
                Issue.record("a past deadline must throw")
            } catch let error as TransportError {
                #expect(error.isDeadlineExceeded)
            }
            #expect(started.duration(to: .now) < .seconds(15))
        }
    }

    @Test func stoppedClientRefusesRequests() async throws {
        try await Self.withMockAndClient { fixture in
            _ = try await fixture.client.send(Self.request(), environment: .production, deadline: Self.deadline())
        }
        // A fresh client whose run() was cancelled before any request.
        let endpoint = APNSClientConfiguration.Endpoint(host: "127.0.0.1", port: 9)
        let client = try APNSHTTP2Client(
            configuration: APNSClientConfiguration(authentication: .token(Self.credentials), production: endpoint),
            logger: Self.quietLogger
        )
        let run = Task { try await client.run() }
        run.cancel()
        try await run.value
        do {
            _ = try await client.send(Self.request(), environment: .production, deadline: Self.deadline())
            Issue.record("expected shuttingDown")
        } catch let error as TransportError {
            #expect(error.description.hasPrefix("shutting down"))
        }
    }

    @Test func gracefulShutdownInAServiceGroupLetsInFlightFinish() async throws {
        let caPath = FileManager.default.temporaryDirectory
            .appendingPathComponent("apns-http2-tests-\(UUID().uuidString).pem").path
        defer { try? FileManager.default.removeItem(atPath: caPath) }
        let server = MockAPNSServer(
            configuration: MockAPNSConfiguration(
                caCertificatePath: caPath,
                providerKeys: [Self.keyID: Self.signingKey.publicKey]
            ),
            logger: Self.quietLogger
        )
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            let port = try await server.listeningPort()
            let endpoint = try APNSClientConfiguration.Endpoint(url: "https://127.0.0.1:\(port)")
            let client = try APNSHTTP2Client(
                configuration: APNSClientConfiguration(
                    authentication: .token(Self.credentials),
                    production: endpoint,
                    additionalTrustRootsPEMPath: caPath
                ),
                logger: Self.quietLogger
            )
            let serviceGroup = ServiceGroup(services: [client], logger: Self.quietLogger)
            group.addTask { try await serviceGroup.run() }
            let response = try await client.send(Self.request(), environment: .production, deadline: Self.deadline())
            #expect(response.status == 200)
            await serviceGroup.triggerGracefulShutdown()
            // run() returns once the connections closed; then the client refuses work.
            try await Task.sleep(for: .milliseconds(200))
            do {
                _ = try await client.send(Self.request(), environment: .production, deadline: Self.deadline())
                Issue.record("expected shuttingDown")
            } catch let error as TransportError {
                #expect(error.description.hasPrefix("shutting down"))
            }
            group.cancelAll()
        }
    }
}

/// Failure modes that need no mock: a server that never answers and a port nobody listens on.
@Suite("APNSHTTP2Client failure modes", .timeLimit(.minutes(1)))
struct ClientFailureModeTests {
    static let credentials = MockAPNSIntegrationTests.credentials
    static let logger = MockAPNSIntegrationTests.quietLogger

    static func withClient(
        port: Int,
        connectTimeout: Duration,
        _ body: @Sendable (APNSHTTP2Client) async throws -> Void
    ) async throws {
        // Its own event loop, so timing does not depend on what other tests load the shared one with.
        let eventLoopGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let client = try APNSHTTP2Client(
            configuration: APNSClientConfiguration(
                authentication: .token(credentials),
                production: APNSClientConfiguration.Endpoint(host: "127.0.0.1", port: port),
                connectTimeout: connectTimeout
            ),
            eventLoopGroup: eventLoopGroup,
            logger: logger
        )
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await client.run() }
                defer { group.cancelAll() }
                try await body(client)
            }
        } catch {
            try await eventLoopGroup.shutdownGracefully()
            throw error
        }
        try await eventLoopGroup.shutdownGracefully()
    }

    @Test func silentServerHitsTheDeadlineWithoutHanging() async throws {
        // Accepts TCP and never says a word: the TLS handshake never completes.
        let blackHole = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in channel.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        let port = try #require(blackHole.localAddress?.port)
        try await Self.withClient(port: port, connectTimeout: .seconds(60)) { client in
            let started = ContinuousClock.now
            do {
                _ = try await client.send(
                    MockAPNSIntegrationTests.request(),
                    environment: .production,
                    deadline: .now + .milliseconds(300)
                )
                Issue.record("expected deadlineExceeded")
            } catch let error as TransportError {
                #expect(error.isDeadlineExceeded)
            }
            #expect(started.duration(to: .now) < .seconds(15))
        }
        try await blackHole.close()
    }

    @Test func refusedConnectionFailsFast() async throws {
        // Find a free port, then close it so nobody listens there.
        let probe = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0)
            .get()
        let port = try #require(probe.localAddress?.port)
        try await probe.close()
        try await Self.withClient(port: port, connectTimeout: .seconds(2)) { client in
            let started = ContinuousClock.now
            do {
                _ = try await client.send(
                    MockAPNSIntegrationTests.request(),
                    environment: .production,
                    deadline: .now + .seconds(10)
                )
                Issue.record("expected connectionFailed")
            } catch let error as TransportError {
                #expect(error.resultReason == "ConnectionFailed", "\(error)")
                #expect(error.isConnectionFailure)
            }
            #expect(started.duration(to: .now) < .seconds(15))
        }
    }
}
