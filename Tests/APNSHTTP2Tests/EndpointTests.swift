import APNSCore
import Testing

@testable import APNSHTTP2

@Suite("Endpoint URL parsing")
struct EndpointTests {
    typealias Endpoint = APNSClientConfiguration.Endpoint

    @Test func defaultPortIs443() throws {
        let endpoint = try Endpoint(url: "https://api.push.apple.com")
        #expect(endpoint == Endpoint(host: "api.push.apple.com", port: 443))
        #expect(endpoint.authority == "api.push.apple.com")
        #expect(!endpoint.isIPAddress)
    }

    @Test func explicitPort2197() throws {
        let endpoint = try Endpoint(url: "https://api.sandbox.push.apple.com:2197")
        #expect(endpoint == Endpoint(host: "api.sandbox.push.apple.com", port: 2197))
        #expect(endpoint.authority == "api.sandbox.push.apple.com:2197")
    }

    @Test func schemeIsCaseInsensitiveAndTrailingSlashAllowed() throws {
        #expect(try Endpoint(url: "HTTPS://api.push.apple.com/") == Endpoint(host: "api.push.apple.com", port: 443))
    }

    @Test func ipv4Literal() throws {
        let endpoint = try Endpoint(url: "https://127.0.0.1:8443")
        #expect(endpoint == Endpoint(host: "127.0.0.1", port: 8443))
        #expect(endpoint.isIPAddress)
        #expect(endpoint.authority == "127.0.0.1:8443")
    }

    @Test func ipv6Literal() throws {
        let endpoint = try Endpoint(url: "https://[::1]:2197")
        #expect(endpoint == Endpoint(host: "::1", port: 2197))
        #expect(endpoint.isIPAddress)
        #expect(endpoint.authority == "[::1]:2197")
        #expect(try Endpoint(url: "https://[::1]").port == 443)
    }

    @Test func defaultsAreApplesHosts() {
        let configuration = APNSClientConfiguration(authentication: .certificate(pkcs12Path: "/x.p12", password: nil))
        #expect(configuration.production == Endpoint(host: "api.push.apple.com", port: 443))
        #expect(configuration.sandbox == Endpoint(host: "api.sandbox.push.apple.com", port: 443))
        #expect(configuration.endpoint(for: .sandbox) == configuration.sandbox)
        #expect(configuration.connectionsPerEndpoint == 2)
        #expect(configuration.connectTimeout == .seconds(10))
        #expect(configuration.pingInterval == .seconds(60))
    }

    @Test(arguments: [
        "http://api.push.apple.com",
        "ftp://api.push.apple.com",
        "api.push.apple.com",
        "https://",
        "https://:443",
        "https://api.push.apple.com:0",
        "https://api.push.apple.com:65536",
        "https://api.push.apple.com:+443",
        "https://api.push.apple.com:port",
        "https://api.push.apple.com/3/device",
        "https://user@api.push.apple.com",
        "https://api.push.apple.com?x=1",
        "https://::1:443",
        "https://[::1",
        "https://[not-ip]:443",
        "https://api push.apple.com",
    ])
    func rejectsMalformedURLs(_ url: String) {
        #expect(throws: APNSClientConfigurationError.self) { try Endpoint(url: url) }
    }

    @Test func errorNamesTheProblem() {
        do {
            _ = try Endpoint(url: "http://api.push.apple.com")
            Issue.record("expected an error")
        } catch {
            #expect("\(error)".contains("https://"))
        }
    }

    @Test func authenticationDescriptionHidesSecrets() {
        let authentication = APNSClientConfiguration.Authentication.certificate(
            pkcs12Path: "/secret/path.p12",
            password: "hunter2"
        )
        #expect(!authentication.description.contains("hunter2"))
        #expect(!authentication.usesProviderTokens)
    }
}
