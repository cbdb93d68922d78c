import Crypto
import Foundation
import JSONCore
import Logging
import MockWebPush
import NIOHPACK
import Testing
import WebPushCore

/// The mock Web Push service through a plain HTTP/2 client (not Herald's), fed what the real
/// sender code produces: WebPushEncryption encrypts and VAPIDSigner signs, and the mock, which
/// decrypts and verifies on its own, must read it as a browser and a push service would.
@Suite("MockWebPushServer", .timeLimit(.minutes(2)))
struct MockWebPushServerTests {
    static let subject = "mailto:ops@example.com"
    static let plaintext = Array(#"{"title":"hello"}"#.utf8)

    /// A running mock with its two default origins, and the path of its CA. Stopping the server
    /// closes the clients' connections.
    static func withServer<Result: Sendable>(
        _ body: @Sendable (_ server: MockWebPushServer, _ caPath: String) async throws -> Result
    ) async throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mock-webpush-tests-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let caPath = directory.appendingPathComponent("ca.pem").path
        var logger = Logger(label: "mock-webpush-tests")
        logger.logLevel = .warning
        let server = MockWebPushServer(configuration: MockWebPushConfiguration(caCertificatePath: caPath), logger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            defer { group.cancelAll() }
            _ = try await server.listeningPorts()
            return try await body(server, caPath)
        }
    }

    static func connect(_ origin: String, caPath: String) async throws -> TestHTTP2Client {
        let port = try #require(URLComponents(string: origin)?.port)
        return try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: nil)
    }

    /// POSTs `plaintext` to `subscription` as a sender does: encrypted by WebPushEncryption and
    /// signed by `signer` (a new key when nil) for `audience` (the endpoint's origin when nil).
    static func push(
        _ client: TestHTTP2Client,
        to subscription: MockWebPushSubscription,
        signer: VAPIDSigner? = nil,
        audience: String? = nil,
        nowSeconds: Int64 = Int64(Date().timeIntervalSince1970),
        headers extraHeaders: [(String, String)] = [],
        body replacement: [UInt8]? = nil,
        flipCiphertextByte: Bool = false
    ) async throws -> TestResponse {
        let url = try #require(URLComponents(string: subscription.endpoint))
        let origin = "https://\(url.host ?? ""):\(url.port ?? 0)"
        let keys = try WebPushSubscriptionKeys(p256dh: subscription.p256dh, auth: subscription.auth)
        var body = try replacement ?? WebPushEncryption.encrypt(plaintext, to: keys)
        // The header is 86 bytes (salt, rs, idlen, key id); the ciphertext follows.
        if flipCiphertextByte { body[86] ^= 0x01 }
        let signer = signer ?? VAPIDSigner(key: P256.Signing.PrivateKey(), subject: subject)
        let authorization = try signer.authorization(origin: audience ?? origin, nowSeconds: nowSeconds)
        let headers = [
            ("authorization", authorization), ("ttl", "60"), ("content-encoding", "aes128gcm"), ("content-type", "application/octet-stream"),
        ]
        return try await client.send(path: url.path, headers: headers + extraHeaders, payload: body)
    }

    @Test func aMessageIsDecryptedAndRecordedAsTheServiceWorkerWouldSeeIt() async throws {
        try await Self.withServer { server, caPath in
            let origin = try await server.origins()[0]
            let subscription = try server.subscribe(origin: 0, applicationServerKey: nil)
            let client = try await Self.connect(origin, caPath: caPath)
            let response = try await Self.push(client, to: subscription, headers: [("urgency", "high"), ("topic", "inbox")])
            #expect(response.status == 201)
            #expect(response.headers.first(name: "location")?.hasPrefix("\(origin)/message/") == true)
            let delivery = try #require(server.deliveries(endpoint: subscription.endpoint).first)
            #expect(delivery.plaintext == Self.plaintext)
            #expect(delivery.ttl == 60 && delivery.urgency == "high" && delivery.topic == "inbox")
            #expect(delivery.vapidSubject == Self.subject && delivery.vapidAudience == origin && delivery.origin == origin)
        }
    }

    /// RFC 8292: the token's `aud` is this origin and `exp` in the future (403 BadJwtToken
    /// otherwise); a subscription bound to a key refuses others (403 VapidPkHashMismatch); no
    /// VAPID at all is 401.
    @Test func vapidForAnotherOriginExpiredOrWithAnotherKeyIsRefused() async throws {
        try await Self.withServer { server, caPath in
            let origins = try await server.origins()
            let subscription = try server.subscribe(origin: 0, applicationServerKey: nil)
            let client = try await Self.connect(origins[0], caPath: caPath)
            let otherOrigin = try await Self.push(client, to: subscription, audience: origins[1])
            #expect(otherOrigin.status == 403 && otherOrigin.reason == "BadJwtToken")
            // VAPIDSigner's tokens live 12 h: signed 13 h ago, this one expired an hour ago.
            let expired = try await Self.push(client, to: subscription, nowSeconds: Int64(Date().timeIntervalSince1970) - 13 * 3600)
            #expect(expired.status == 403 && expired.reason == "BadJwtToken")
            let path = try #require(URLComponents(string: subscription.endpoint)?.path)
            let unsigned = try await client.send(path: path, headers: [("ttl", "60"), ("content-encoding", "aes128gcm")], payload: [1])
            #expect(unsigned.status == 401)
            #expect(server.deliveryCount(endpoint: subscription.endpoint) == 0)

            let key = P256.Signing.PrivateKey()
            let bound = try server.subscribe(origin: 0, applicationServerKey: VAPIDSigner(key: key, subject: Self.subject).publicKeyText)
            let otherKey = try await Self.push(client, to: bound)
            #expect(otherKey.status == 403 && otherKey.reason == "VapidPkHashMismatch")
            let sameKey = try await Self.push(client, to: bound, signer: VAPIDSigner(key: key, subject: Self.subject))
            #expect(sameKey.status == 201)
        }
    }

    @Test func aFlippedCiphertextByteIsBadEncryption() async throws {
        try await Self.withServer { server, caPath in
            let origin = try await server.origins()[0]
            let subscription = try server.subscribe(origin: 0, applicationServerKey: nil)
            let client = try await Self.connect(origin, caPath: caPath)
            let response = try await Self.push(client, to: subscription, flipCiphertextByte: true)
            #expect(response.status == 400 && response.reason == "BadEncryption")
            #expect(server.deliveryCount(endpoint: subscription.endpoint) == 0)
        }
    }

    /// A scripted 429 is answered with its Retry-After and is no delivery; the next request is.
    @Test func aScripted429ComesFirstThenTheMessageIsDelivered() async throws {
        try await Self.withServer { server, caPath in
            let origin = try await server.origins()[0]
            let subscription = try server.subscribe(origin: 0, applicationServerKey: nil)
            let client = try await Self.connect(origin, caPath: caPath)
            server.script(endpoint: subscription.endpoint, answers: [.status(429, retryAfterSeconds: 7)])
            let throttled = try await Self.push(client, to: subscription)
            #expect(throttled.status == 429 && throttled.headers.first(name: "retry-after") == "7")
            #expect(server.deliveryCount(endpoint: subscription.endpoint) == 0)
            let delivered = try await Self.push(client, to: subscription)
            #expect(delivered.status == 201)
            #expect(server.deliveryCount(endpoint: subscription.endpoint) == 1)

            let statsResponse = try await client.send(method: "GET", path: "/stats", payload: [])
            let stats = try JSONParser.parse(statsResponse.body)
            #expect(stats["by_status"]?["429"] == .number("1") && stats["by_status"]?["201"] == .number("1"))
            #expect(stats["deliveries_by_endpoint"]?[subscription.endpoint] == .number("1"))
        }
    }

    /// `.gone` and `expire(endpoint:)`: 410 with autopush's errno 106, for good.
    @Test func aGoneSubscriptionAnswers410Forever() async throws {
        try await Self.withServer { server, caPath in
            let origin = try await server.origins()[0]
            let scripted = try server.subscribe(origin: 0, applicationServerKey: nil)
            let expired = try server.subscribe(origin: 0, applicationServerKey: nil)
            let client = try await Self.connect(origin, caPath: caPath)
            server.script(endpoint: scripted.endpoint, answers: [.gone])
            server.expire(endpoint: expired.endpoint)
            for subscription in [scripted, scripted, expired] {
                let response = try await Self.push(client, to: subscription)
                let body = try JSONParser.parse(response.body)
                #expect(response.status == 410 && body["errno"] == .number("106"))
            }
            #expect(server.deliveryCount(endpoint: scripted.endpoint) + server.deliveryCount(endpoint: expired.endpoint) == 0)
        }
    }

    @Test func anUnknownEndpointIs404AndABodyOver4096BytesIs413() async throws {
        try await Self.withServer { server, caPath in
            let origin = try await server.origins()[0]
            let subscription = try server.subscribe(origin: 0, applicationServerKey: nil)
            let client = try await Self.connect(origin, caPath: caPath)
            let unknown = try await client.send(path: "/push/never-made", headers: [("ttl", "60")], payload: [1])
            #expect(unknown.status == 404)
            let tooLarge = try await Self.push(client, to: subscription, body: [UInt8](repeating: 7, count: 4097))
            #expect(tooLarge.status == 413)
        }
    }

    /// Each port is an origin of its own: its subscriptions (here one made over HTTP, as the demo
    /// makes them) and its connections.
    @Test func eachOriginCountsItsOwnConnections() async throws {
        try await Self.withServer { server, caPath in
            let origins = try await server.origins()
            #expect(origins.count == 2 && origins[0] != origins[1])
            let onFirst = try server.subscribe(origin: 0, applicationServerKey: nil)
            for _ in 0..<2 {
                let client = try await Self.connect(origins[0], caPath: caPath)
                let response = try await Self.push(client, to: onFirst)
                #expect(response.status == 201)
            }
            let second = try await Self.connect(origins[1], caPath: caPath)
            let made = try await second.send(path: "/subscribe", payload: [])
            #expect(made.status == 201)
            let json = try JSONParser.parse(made.body)
            let endpoint = try #require(json["endpoint"]?.stringValue)
            let p256dh = try #require(json["keys"]?["p256dh"]?.stringValue)
            let auth = try #require(json["keys"]?["auth"]?.stringValue)
            #expect(endpoint.hasPrefix("\(origins[1])/push/"))
            let delivered = try await Self.push(second, to: MockWebPushSubscription(endpoint: endpoint, p256dh: p256dh, auth: auth))
            #expect(delivered.status == 201)

            let connections = server.stats.connectionsByOrigin
            #expect(connections[origins[0]] == 2 && connections[origins[1]] == 1)
        }
    }
}
