import Crypto
import Foundation
import HeraldService
import Logging
import KafkaMessages
import KafkaTransport
import MockWebPush
import PostgresNIO
import PostgresStores
import PushCore
import PushStores
import ServiceLifecycle
import Testing

/// Browsers through standard Web Push against the real `herald`, Tansu, PostgreSQL, the mock
/// APNs, the mock FCM and the mock push service (two origins), configured only through
/// HERALD_WEBPUSH_*: one event reaches a user's iPhone, Android phone and two browsers, each
/// browser's copy decrypted by the mock to the event's message; a gone subscription (410) is
/// marked and published; a 429 with Retry-After is honoured; a redelivered event republishes the
/// same results and sends nothing; a subscription outside the allow-list is refused at the intake
/// and, written into the table directly, answered `rejected` without a connection.
@Suite(.timeLimit(.minutes(5)))
struct WebPushDeliveryIntegrationTests {
    @Test func oneEventReachesAPhoneOfEachKindAndTwoBrowsers() async throws {
        let testbed = try HeraldTestbed()
        let browsers = try BrowserWorld(directory: testbed.directory)
        let iPhone = TestDevice(user: "alice", token: TestDevice.randomToken(), environment: "production")
        let pixel = AndroidDeliveryIntegrationTests.pixel("alice")
        try await testbed.withMocks {
            try await withRunningServices(ServiceGroup(services: [browsers.server], logger: testbed.logger)) {
                let origins = try await browsers.server.origins()
                #expect(origins.count == 2)
                let chrome = try browsers.server.subscribe(origin: 0, applicationServerKey: browsers.publicKey)
                let safari = try browsers.server.subscribe(origin: 1, applicationServerKey: browsers.publicKey)
                let gone = try browsers.server.subscribe(origin: 1, applicationServerKey: browsers.publicKey)
                let throttled = try browsers.server.subscribe(origin: 0, applicationServerKey: browsers.publicKey)
                browsers.server.script(endpoint: gone.endpoint, answers: [.gone])
                browsers.server.script(endpoint: throttled.endpoint, answers: [.status(429, retryAfterSeconds: 1)])

                var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
                environment.merge(browsers.environment) { _, browser in browser }
                let herald = try await testbed.startHerald(environment)
                try await testbed.register([iPhone])
                try await testbed.registerAndroid(user: "alice", token: pixel, at: "2026-11-28T10:00:00Z")
                for (user, subscription) in [("alice", chrome), ("alice", safari), ("bob", gone), ("carol", throttled)] {
                    try await browsers.register(user: user, subscription, through: testbed)
                }
                // Refused at the intake: a host outside HERALD_WEBPUSH_ALLOWED_HOSTS.
                let forbidden = MockWebPushSubscription(
                    endpoint: "https://push.evil.example/push/1", p256dh: chrome.p256dh, auth: chrome.auth, applicationServerKey: nil)
                try await browsers.register(user: "alice", forbidden, through: testbed)
                try await browsers.waitForSubscriptions(users: ["alice", "bob", "carol"], count: 4, testbed: testbed)

                let reader = try TopicReader(topics: [testbed.topics.results, testbed.topics.unregistered, testbed.topics.deadLetters])
                try await browsers.publishEvent(id: "order-1", users: ["alice", "bob", "carol"], testbed: testbed)
                var records = try await reader.read(timeout: .seconds(60)) { records in
                    records.compactMap(ResultRecord.init).count >= 6 && records.contains { $0.topic == testbed.topics.unregistered }
                        && records.contains { $0.topic == testbed.topics.deadLetters }
                }
                let firstValues = Dictionary(records.compactMap(ResultRecord.init).map { ($0.token ?? "", $0.value) }) { first, _ in first }
                let results = records.filter { $0.topic == testbed.topics.results }.compactMap(\.json)
                #expect(results.count == 6, "one result per device and browser: \(results)")
                func result(_ token: String) -> [String: Any]? { results.first { $0["token"] as? String == token } }
                #expect(result(iPhone.token)?["status"] as? String == "delivered")
                #expect(result(pixel)?["status"] as? String == "delivered")
                for browser in [chrome, safari] {
                    let delivered = try #require(result(browser.endpoint))
                    #expect(delivered["platform"] as? String == "webpush" && delivered["status"] as? String == "delivered")
                    #expect(delivered["topic"] as? String == browsers.app && delivered["webpush_status"] as? Int == 201)
                    #expect((delivered["webpush_location"] as? String)?.hasPrefix("https://127.0.0.1:") == true)
                    let copies = browsers.server.deliveries(endpoint: browser.endpoint)
                    #expect(copies.count == 1)
                    #expect(try JSONSerialization.jsonObject(with: Data(copies.first?.plaintext ?? [])) as? [String: String] == ["order": "order-1"])
                }
                #expect(browsers.server.deliveries(endpoint: chrome.endpoint).first?.vapidAudience == origins[0])
                #expect(browsers.server.deliveries(endpoint: safari.endpoint).first?.vapidAudience == origins[1])
                #expect(result(gone.endpoint)?["status"] as? String == "unregistered")
                #expect(result(gone.endpoint)?["webpush_status"] as? Int == 410)
                let late = try #require(result(throttled.endpoint))
                #expect(late["status"] as? String == "delivered" && late["attempts"] as? Int == 2, "retried after a 429: \(late)")
                #expect(late["latency_ms"] as? Int ?? 0 >= 1_000, "not before the Retry-After of 1 s")
                let unregistered = try #require(records.first { $0.topic == testbed.topics.unregistered }?.json)
                #expect(unregistered["platform"] as? String == "webpush" && unregistered["token"] as? String == gone.endpoint)
                #expect(try await browsers.subscriptions(users: ["bob"], testbed: testbed).isEmpty, "the gone subscription is marked")
                let deadLetter = try #require(records.first { $0.topic == testbed.topics.deadLetters })
                #expect(deadLetter.header("herald-error") == "invalid_token")

                // Redelivered: the same results again, nothing sent.
                let sent = browsers.server.stats.requests
                try await browsers.publishEvent(id: "order-1", users: ["alice", "bob", "carol"], testbed: testbed)
                records = try await reader.read(timeout: .seconds(60)) { records in
                    records.compactMap(ResultRecord.init).filter { $0.eventID == "order-1" }.count >= 6
                }
                let again = records.compactMap(ResultRecord.init).filter { $0.eventID == "order-1" }
                #expect(again.count == 6)
                for second in again {
                    #expect(second.value == firstValues[second.token ?? ""], "republished byte for byte: \(second.token ?? "")")
                }
                #expect(browsers.server.stats.requests == sent, "a redelivered event sends nothing")

                herald.send(SIGTERM)
                #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
            }
        }
    }
}

extension WebPushDeliveryIntegrationTests {
    /// An app API may write the registry directly: a subscription row whose endpoint is outside
    /// HERALD_WEBPUSH_ALLOWED_HOSTS gets a `rejected` result (`invalid_token`, no attempt) and
    /// Herald opens no connection for it; the allowed browser beside it is delivered.
    @Test func aRowWrittenDirectlyWithAForbiddenEndpointIsRejectedWithoutAConnection() async throws {
        let testbed = try HeraldTestbed()
        let browsers = try BrowserWorld(directory: testbed.directory)
        try await testbed.withMocks {
            try await withRunningServices(ServiceGroup(services: [browsers.server], logger: testbed.logger)) {
                let origins = try await browsers.server.origins()
                let allowed = try browsers.server.subscribe(origin: 0, applicationServerKey: browsers.publicKey)
                // The mock's second origin is on the same host, so the list below names only the first's port
                // through a host the mock does not serve: a forbidden endpoint that would reach the mock.
                let forbiddenOnMock = try browsers.server.subscribe(origin: 1, applicationServerKey: browsers.publicKey)
                let forbidden = forbiddenOnMock.endpoint.replacingOccurrences(of: "https://127.0.0.1:", with: "https://localhost:")
                var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
                environment.merge(browsers.environment) { _, browser in browser }
                let herald = try await testbed.startHerald(environment)
                try await browsers.register(user: "dora", allowed, through: testbed)
                try await browsers.insertDirectly(user: "dora", endpoint: forbidden, keys: forbiddenOnMock)
                try await browsers.waitForSubscriptions(users: ["dora"], count: 2, testbed: testbed)
                let connectionsBefore = browsers.server.stats.connectionsByOrigin
                try await browsers.publishEvent(id: "direct-1", users: ["dora"], testbed: testbed, phones: false)
                let records = try await TopicReader(topics: [testbed.topics.results]).read(timeout: .seconds(60)) {
                    $0.compactMap(ResultRecord.init).count >= 2
                }
                let results = records.compactMap(\.json)
                let refused = try #require(results.first { $0["token"] as? String == forbidden })
                #expect(refused["status"] as? String == "rejected" && refused["reason"] as? String == "invalid_token")
                #expect(refused["attempts"] as? Int == 0 && refused["webpush_status"] is NSNull)
                #expect(results.first { $0["token"] as? String == allowed.endpoint }?["status"] as? String == "delivered")
                #expect(
                    browsers.server.stats.connectionsByOrigin[origins[1]] ?? 0 == connectionsBefore[origins[1]] ?? 0, "no connection to the forbidden origin")
                #expect(browsers.server.deliveryCount(endpoint: forbiddenOnMock.endpoint) == 0)
                herald.send(SIGTERM)
                #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
            }
        }
    }
}

extension WebPushDeliveryIntegrationTests {
    /// SIGKILL while browser pushes are in flight (the mock answers each after 300 ms), then a
    /// new member of the group: every event gets its result, every browser at least its copy,
    /// and the copies pushed twice are at most HERALD_MAX_CONCURRENT_SENDS (what was in flight).
    @Test func aCrashMidRunRepeatsAtMostWhatWasInFlight() async throws {
        let testbed = try HeraldTestbed()
        let browsers = try BrowserWorld(directory: testbed.directory, answerDelayMilliseconds: 300)
        let maxInFlight = 8
        try await testbed.withMocks {
            try await withRunningServices(ServiceGroup(services: [browsers.server], logger: testbed.logger)) {
                _ = try await browsers.server.origins()
                let users = (0..<40).map { "user-\($0)" }
                var subscriptions: [MockWebPushSubscription] = []
                for (index, user) in users.enumerated() {
                    let subscription = try browsers.server.subscribe(origin: index % 2, applicationServerKey: browsers.publicKey)
                    subscriptions.append(subscription)
                    try await browsers.register(user: user, subscription, through: testbed)
                }
                var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
                environment.merge(browsers.environment) { _, browser in browser }
                environment["HERALD_MAX_CONCURRENT_SENDS"] = String(maxInFlight)
                var herald = try await testbed.startHerald(environment)
                try await browsers.waitForSubscriptions(users: users, count: users.count, testbed: testbed)
                for (index, user) in users.enumerated() {
                    try await browsers.publishEvent(id: "crash-\(index)", users: [user], testbed: testbed, phones: false)
                }
                let clock = ContinuousClock()
                let killBy = clock.now + .seconds(60)
                while browsers.server.stats.deliveries < 10, clock.now < killBy { try await Task.sleep(for: .milliseconds(20)) }
                herald.send(SIGKILL)
                #expect(try await herald.waitForExit(timeout: .seconds(10)) != nil)
                let deliveredAtCrash = browsers.server.stats.deliveries
                herald = try HeraldProcess(environment: herald.environment, logPath: herald.logPath)
                let records = try await TopicReader(topics: [testbed.topics.results]).read(timeout: .seconds(120)) { records in
                    Set(records.compactMap(ResultRecord.init).map(\.eventID)).count >= users.count
                }
                let results = records.compactMap(ResultRecord.init)
                #expect(Set(results.map(\.eventID)).count == users.count, "every event has its result")
                #expect(results.allSatisfy { $0.status == "delivered" }, "\(Dictionary(grouping: results, by: \.status).mapValues(\.count))")
                let copies = subscriptions.map { browsers.server.deliveryCount(endpoint: $0.endpoint) }
                #expect(copies.allSatisfy { $0 >= 1 }, "every browser got its message: \(copies)")
                let repeated = copies.reduce(0) { $0 + max($1 - 1, 0) }
                #expect(repeated <= maxInFlight, "a crash repeats at most what was in flight: \(repeated) repeats, bound \(maxInFlight)")
                print("web push crash: \(deliveredAtCrash) delivered at the SIGKILL, \(repeated) pushed twice (bound \(maxInFlight))")
                herald.send(SIGTERM)
                #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
            }
        }
    }
}

/// The browser side of a test: a mock push service with two origins, a web app with its VAPID
/// key, and the HERALD_WEBPUSH_* configuration pointing at them.
struct BrowserWorld {
    let server: MockWebPushServer
    let app = "shop-web-\(UUID().uuidString.prefix(8).lowercased())"
    let key = P256.Signing.PrivateKey()
    let directory: URL

    init(directory: URL, answerDelayMilliseconds: Int = 0) throws {
        self.directory = directory
        var configuration = MockWebPushConfiguration()
        configuration.caCertificatePath = directory.appendingPathComponent("webpush-ca.pem").path
        configuration.answerDelayMilliseconds = answerDelayMilliseconds
        server = MockWebPushServer(configuration: configuration, logger: Logger(label: "mock-webpush"))
        try key.pemRepresentation.write(to: directory.appendingPathComponent("vapid.pem"), atomically: true, encoding: .utf8)
    }

    /// The application server key subscriptions are made with.
    var publicKey: String {
        key.publicKey.x963Representation.base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// The web app's VAPID key and contact.
    var vapidEnvironment: [String: String] {
        ["HERALD_WEBPUSH_VAPID_KEY_PATH": directory.appendingPathComponent("vapid.pem").path, "HERALD_WEBPUSH_SUBJECT": "mailto:ops@example.com"]
    }

    /// ``vapidEnvironment`` and the mock's host and CA (written once it runs).
    var environment: [String: String] {
        vapidEnvironment.merging([
            "HERALD_WEBPUSH_ALLOWED_HOSTS": "127.0.0.1",
            "HERALD_WEBPUSH_CA_PATH": directory.appendingPathComponent("webpush-ca.pem").path,
        ]) { first, _ in first }
    }

    /// Registers `subscription` for `user` through push.tokens, as an app's API would.
    func register(user: String, _ subscription: MockWebPushSubscription, through testbed: HeraldTestbed) async throws {
        let value = """
            {"action":"register","user_id":"\(user)","topic":"\(app)","platform":"webpush","timestamp":"2026-11-28T10:00:00Z",
             "subscription":{"endpoint":"\(subscription.endpoint)","keys":{"p256dh":"\(subscription.p256dh)","auth":"\(subscription.auth)"}}}
            """
        try await testbed.producer.send(
            KafkaOutgoingMessage(topic: testbed.topics.tokens, key: Array(subscription.endpoint.utf8), value: Array(value.utf8)))
    }

    /// Writes a subscription row as an app API may, past the intake's checks.
    func insertDirectly(user: String, endpoint: String, keys: MockWebPushSubscription) async throws {
        _ = try await RegistryDatabase.withStore { _, client in
            try await client.query(
                """
                INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at, platform, webpush_p256dh, webpush_auth)
                VALUES (\(app), \(endpoint), \(user), 'production', now(), now(), 'webpush', \(keys.p256dh), \(keys.auth))
                """,
                logger: client.sqlLogger
            )
        }
    }

    /// The active subscriptions of `users` under ``app``.
    func subscriptions(users: [String], testbed: HeraldTestbed) async throws -> [DeviceToken] {
        try await HeraldApplication.withTokenStore(postgresURL: try PostgresURL(TestEnvironment.postgresURL), logger: testbed.logger) { store in
            try await store.activeDevices(apnsTopic: nil, fcmPackage: nil, webPushApp: app, userIDs: users).values.flatMap { $0 }
        }
    }

    func waitForSubscriptions(users: [String], count: Int, testbed: HeraldTestbed) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if try await subscriptions(users: users, testbed: testbed).count == count { return }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw TestFailure("\(count) subscriptions of \(users) did not reach PostgreSQL within 60 s")
    }

    /// Publishes an event for `users`' browsers and, unless `phones` is false, their iPhones and Android phones.
    func publishEvent(id: String, users: [String], testbed: HeraldTestbed, phones: Bool = true) async throws {
        let list = users.map { "\"\($0)\"" }.joined(separator: ",")
        let phoneParts = """
            "topic":"\(testbed.bundleID)","payload":{"aps":{"alert":"Shipped"}},
            "fcm":{"package":"\(testbed.fcmPackage)","message":{"notification":{"title":"Shipped"}}},
            """
        let value = """
            {"id":"\(id)","user_ids":[\(list)],\(phones ? phoneParts : "")"webpush":{"app":"\(app)","message":{"order":"\(id)"}}}
            """
        try await testbed.producer.send(KafkaOutgoingMessage(topic: testbed.topics.requests, key: Array(id.utf8), value: Array(value.utf8)))
    }
}
