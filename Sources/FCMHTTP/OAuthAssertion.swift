import JSONCore
import Crypto
import FCMCore
import Foundation
import _CryptoExtras

/// Signs the OAuth 2.0 JWT bearer assertion (RFC 7523) a service account exchanges for an access
/// token: RS256 over `{"alg":"RS256","typ":"JWT","kid"}` and the claims `iss` (client_email),
/// `scope` (FCM's), `aud` (token_uri), `iat` and `exp` = iat + 3600.
struct OAuthAssertionSigner: Sendable {
    /// The OAuth scope FCM's send API requires.
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    /// The longest assertion Google accepts: an hour.
    static let lifetimeSeconds: Int64 = 3600

    let account: FCMServiceAccount
    private let key: _RSA.Signing.PrivateKey

    init(account: FCMServiceAccount) throws(FCMServiceAccountError) {
        self.account = account
        do {
            key = try _RSA.Signing.PrivateKey(pemRepresentation: account.privateKeyPEM)
        } catch {
            throw FCMServiceAccountError("private_key is not an RSA key of 2048 bits or more")
        }
    }

    /// The assertion, issued at `issuedAt` (UNIX seconds).
    func assertion(issuedAt: Int64) throws -> String {
        var header: [UInt8] = Array(#"{"alg":"RS256","typ":"JWT","kid":"#.utf8)
        JSONString.write(account.privateKeyID, to: &header)
        header.append(UInt8(ascii: "}"))
        var claims: [UInt8] = Array(#"{"iss":"#.utf8)
        JSONString.write(account.clientEmail, to: &claims)
        claims.append(contentsOf: #","scope":"#.utf8)
        JSONString.write(Self.scope, to: &claims)
        claims.append(contentsOf: #","aud":"#.utf8)
        JSONString.write(account.tokenURI, to: &claims)
        claims.append(contentsOf: #","iat":\#(issuedAt),"exp":\#(issuedAt + Self.lifetimeSeconds)}"#.utf8)
        let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(claims)
        let signature = try key.signature(for: Data(signingInput.utf8), padding: .insecurePKCS1v1_5)
        return signingInput + "." + Base64URL.encode(Array(signature.rawRepresentation))
    }
}

/// Base64url without padding (RFC 7515).
enum Base64URL {
    static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
