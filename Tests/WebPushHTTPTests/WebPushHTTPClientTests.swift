// WebPushHTTPClientTests.swift: the web push sender against the mock push service (two origins,
// HTTP/2 over TLS, decrypting what it receives), and how it splits an endpoint.

import Crypto
import Foundation
import Logging
import MockWebPush
import PushCore
import Synchronization
import Testing
import WebPushCore
@testable import WebPushHTTP

@Suite("Web Push sender against the mock push service", .timeLimit(.minutes(2)))
struct WebPushHTTPClientTests {
    /// One message to subscriptions on two origins: each origin decrypts the same plaintext,
    /// gets the headers as sent and a VAPID token for its own origin, on a connection of its own.
    @Test func aMessageToTwoOriginsIsDecryptedToTheSamePlaintext() async throws {
        let signer = VAPIDSigner(key: P256.Signing.PrivateKey(), subject: WebPushHarness.subject)
        try await WebPushHarness.run(credentials: WebPushCredentials(fallback: .init(apps: [], current: signer))) { harness in
            let plaintext = Array(#"{"title":"Shipped","order":42}"#.utf8)
            let topic = WebPushTopic.hashing("order-42")
            for origin in 0..<2 {
                let (mock, subscription) = try harness.subscribe(origin: origin)
                let request = WebPushRequest(
                    app: "shop", subscription: subscription, plaintext: plaintext, ttl: .seconds(3600), urgency: .high, topic: topic)
                let response = try await harness.send(request)
                #expect(response.status == 201)
                #expect(response.location?.hasPrefix(harness.origins[origin]) == true)
                let delivery = try #require(harness.server.deliveries(endpoint: mock.endpoint).first)
                #expect(delivery.plaintext == plaintext)
                #expect(delivery.ttl == 3600)
                #expect(delivery.urgency == "high")
                #expect(delivery.topic == topic)
                #expect(delivery.vapidSubject == WebPushHarness.subject)
                #expect(delivery.vapidAudience == harness.origins[origin])
                #expect(delivery.origin == harness.origins[origin])
            }
            let connections = harness.server.stats.connectionsByOrigin
            #expect(connections.values.reduce(0, +) == 2)
            #expect(connections.values.filter { $0 > 0 }.count == 2)
        }
    }

    /// A host the client's allow-list refuses fails before any connection, on every origin, alone
    /// and in a batch; so does a message for an app no VAPID key serves.
    @Test func aRefusedHostAndAnAppWithoutKeyOpenNoConnection() async throws {
        let signer = VAPIDSigner(key: P256.Signing.PrivateKey(), subject: WebPushHarness.subject)
        let credentials = WebPushCredentials(entries: [.init(apps: ["shop"], current: signer)])
        try await WebPushHarness.run(allowList: WebPushHostAllowList(["push.example.com"]), credentials: credentials) { harness in
            let (_, subscription) = try harness.subscribe(origin: 0)
            let request = WebPushRequest(app: "shop", subscription: subscription, plaintext: Array("hello".utf8))
            await #expect(throws: WebPushHostRefusedError(host: "127.0.0.1")) { try await harness.send(request) }
            let answers = await harness.sendAll([request, request])
            for answer in answers {
                #expect(throws: WebPushHostRefusedError.self) { try answer.get() }
            }
            #expect(harness.server.stats.connectionsByOrigin.values.reduce(0, +) == 0)
        }
        try await WebPushHarness.run(credentials: credentials) { harness in
            let (_, subscription) = try harness.subscribe(origin: 1)
            let request = WebPushRequest(app: "blog", subscription: subscription, plaintext: Array("hello".utf8))
            await #expect(throws: WebPushNoCredentialError(app: "blog")) { try await harness.send(request) }
            #expect(harness.server.stats.connectionsByOrigin.values.reduce(0, +) == 0)
        }
    }

    /// A subscription made with the previous key is signed with that key while the entry lists
    /// it, and refused without sending once it no longer does.
    @Test func aSubscriptionBoundToThePreviousKeyIsSignedWithIt() async throws {
        let previous = VAPIDSigner(key: P256.Signing.PrivateKey(), subject: WebPushHarness.subject)
        let current = VAPIDSigner(key: P256.Signing.PrivateKey(), subject: WebPushHarness.subject)
        let credentials = WebPushCredentials(entries: [.init(apps: ["shop"], current: current, previous: [previous])])
        try await WebPushHarness.run(credentials: credentials) { harness in
            let (mock, subscription) = try harness.subscribe(origin: 0, applicationServerKey: previous.publicKeyText)
            let request = WebPushRequest(
                app: "shop", subscription: subscription, vapidPublicKey: previous.publicKeyText, plaintext: Array("hello".utf8))
            #expect(try await harness.send(request).status == 201)
            #expect(harness.server.deliveryCount(endpoint: mock.endpoint) == 1)

            harness.client.updateCredentials(WebPushCredentials(entries: [.init(apps: ["shop"], current: current)]))
            await #expect(throws: WebPushNoCredentialError.self) { try await harness.send(request) }
            #expect(harness.server.stats.requests == 1)
        }
    }

    /// The service's 429 with Retry-After and its 410 reach the caller as answers.
    @Test func scriptedAnswersAreReadWithTheirRetryAfter() async throws {
        let signer = VAPIDSigner(key: P256.Signing.PrivateKey(), subject: WebPushHarness.subject)
        try await WebPushHarness.run(credentials: WebPushCredentials(fallback: .init(apps: [], current: signer))) { harness in
            let (mock, subscription) = try harness.subscribe(origin: 1)
            harness.server.script(endpoint: mock.endpoint, answers: [.status(429, retryAfterSeconds: 3), .gone])
            let request = WebPushRequest(app: "shop", subscription: subscription, plaintext: Array("hello".utf8))
            let throttled = try await harness.send(request)
            #expect(throttled.status == 429)
            #expect(throttled.retryAfter == .seconds(3))
            #expect(throttled.decision == .retry(notBefore: .seconds(3), serverTrouble: false))
            let gone = try await harness.send(request)
            #expect(gone.status == 410)
            #expect(gone.decision == .unregistered)
            #expect(harness.server.deliveryCount(endpoint: mock.endpoint) == 0)
        }
    }

    /// A batch over both origins: every message is answered once and delivered once.
    @Test func aBatchOverTwoOriginsIsDeliveredWhole() async throws {
        let signer = VAPIDSigner(key: P256.Signing.PrivateKey(), subject: WebPushHarness.subject)
        try await WebPushHarness.run(credentials: WebPushCredentials(fallback: .init(apps: [], current: signer))) { harness in
            let subscriptions = try (0..<40).map { try harness.subscribe(origin: $0 % 2) }
            let requests = subscriptions.enumerated().map { index, subscription in
                WebPushRequest(app: "shop", subscription: subscription.subscription, plaintext: Array("message \(index)".utf8), precedence: .bulk)
            }
            let answers = await harness.sendAll(requests)
            #expect(try answers.allSatisfy { try $0.get().status == 201 })
            for (index, subscription) in subscriptions.enumerated() {
                #expect(harness.server.deliveries(endpoint: subscription.mock.endpoint).map(\.plaintext) == [Array("message \(index)".utf8)])
            }
            #expect(harness.server.stats.deliveries == 40)
        }
    }

    /// An endpoint splits into the origin connected to and the `:path`; an authority that is not
    /// `host[:port]` is refused.
    @Test func anEndpointSplitsIntoOriginAndPath() throws {
        let apple = try #require(WebPushTarget(endpoint: "https://Web.Push.Apple.com/QGuQyavXutnMH?x=1#fragment"))
        #expect(apple.origin == WebPushOrigin(host: "web.push.apple.com", port: 443))
        #expect(apple.path == "/QGuQyavXutnMH?x=1")
        let local = try #require(WebPushTarget(endpoint: "https://127.0.0.1:8443?id=7"))
        #expect(local.origin == WebPushOrigin(host: "127.0.0.1", port: 8443))
        #expect(local.path == "/?id=7")
        let literal = try #require(WebPushTarget(endpoint: "https://[::1]:9000/push/a"))
        #expect(literal.origin == WebPushOrigin(host: "::1", port: 9000))
        for refused in ["http://push.example.com/a", "https://user@push.example.com/a", "https://push.example.com:0/a", "https://:443/a"] {
            #expect(WebPushTarget(endpoint: refused)?.origin == nil)
        }
    }
}

/// The mock push service on two origins and a ``WebPushHTTPClient`` trusting its CA.
struct WebPushHarness: Sendable {
    var server: MockWebPushServer
    var client: WebPushHTTPClient
    /// `https://127.0.0.1:<port>`, in the mock's order.
    var origins: [String]

    static let logger = Logger(label: "webpush-harness", factory: { _ in SwiftLogNoOpLogHandler() })
    static let subject = "mailto:ops@example.com"
    /// What subscriptions are checked against: the mock's host.
    static let loopback = WebPushHostAllowList(["127.0.0.1"])

    /// Starts the mock, then a client with `credentials` and `allowList`, runs `body`, then stops both.
    static func run(
        allowList: WebPushHostAllowList = loopback,
        credentials: WebPushCredentials,
        _ body: @Sendable (WebPushHarness) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("webpush-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let caPath = directory.appendingPathComponent("mock-webpush-ca.pem").path
        let server = MockWebPushServer(configuration: MockWebPushConfiguration(ports: [0, 0], caCertificatePath: caPath), logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            do {
                let origins = try await server.origins()
                let configuration = WebPushClientConfiguration(credentials: credentials, allowList: allowList, additionalTrustRootsPEMPath: caPath)
                let client = try WebPushHTTPClient(configuration: configuration, logger: logger)
                group.addTask { try await client.run() }
                try await body(WebPushHarness(server: server, client: client, origins: origins))
            } catch {
                group.cancelAll()
                throw error
            }
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    /// A new subscription on origin `index`, as the mock gives it and as the pipeline checks it.
    func subscribe(origin index: Int, applicationServerKey: String? = nil) throws -> (mock: MockWebPushSubscription, subscription: WebPushSubscription) {
        let mock = try server.subscribe(origin: index, applicationServerKey: applicationServerKey)
        let subscription = try WebPushSubscription(endpoint: mock.endpoint, p256dh: mock.p256dh, auth: mock.auth, allowing: Self.loopback)
        return (mock, subscription)
    }

    /// Sends `request` with a deadline ten seconds from now.
    func send(_ request: WebPushRequest) async throws -> WebPushResponse {
        try await client.send(request, deadline: .now + .seconds(10))
    }

    /// Sends `requests` as one batch; returns each one's answer, by index.
    func sendAll(_ requests: [WebPushRequest]) async -> [Result<WebPushResponse, any Error>] {
        let answers = Mutex<[Result<WebPushResponse, any Error>?]>(Array(repeating: nil, count: requests.count))
        await client.sendAll(requests, deadline: .now + .seconds(10)) { index, answer in
            answers.withLock { $0[index] = answer }
        }
        return answers.withLock { stored in stored.map { $0 ?? .failure(CancellationError()) } }
    }
}
