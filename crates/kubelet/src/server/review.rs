//! The API server edge of webhook authentication and authorization: TokenReview and
//! SubjectAccessReview creates. Owns nothing; receives a token or a user plus request
//! attributes; emits the API server's answer. `KubeReviews` talks through a `kube::Client`;
//! tests substitute their own `ReviewApi`.

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};

use super::authn::UserInfo;
use super::authz::Attributes;

/// The answer to a SubjectAccessReview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessDecision {
    pub allowed: bool,
    pub reason: String,
}

/// TokenReview / SubjectAccessReview calls.
#[async_trait]
pub trait ReviewApi: Send + Sync {
    /// `Ok(None)`: the API server does not know the token.
    async fn token_review(&self, token: &str) -> Result<Option<UserInfo>, String>;
    async fn access_review(
        &self,
        user: &UserInfo,
        attrs: &Attributes,
        subresource: &str,
    ) -> Result<AccessDecision, String>;
}

/// Reviews through the kubelet's API client.
pub struct KubeReviews(pub kube::Client);

#[async_trait]
impl ReviewApi for KubeReviews {
    async fn token_review(&self, token: &str) -> Result<Option<UserInfo>, String> {
        let api: kube::Api<TokenReview> = kube::Api::all(self.0.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..Default::default()
        };
        let out = api
            .create(&kube::api::PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview: {e}"))?;
        let status = out.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Ok(None);
        }
        let user = status.user.unwrap_or_default();
        Ok(Some(UserInfo {
            name: user.username.unwrap_or_default(),
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
        }))
    }

    async fn access_review(
        &self,
        user: &UserInfo,
        attrs: &Attributes,
        subresource: &str,
    ) -> Result<AccessDecision, String> {
        let api: kube::Api<SubjectAccessReview> = kube::Api::all(self.0.clone());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(attrs.verb.clone()),
                    version: Some("v1".to_owned()),
                    resource: Some("nodes".to_owned()),
                    subresource: Some(subresource.to_owned()),
                    name: Some(attrs.node_name.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let out = api
            .create(&kube::api::PostParams::default(), &review)
            .await
            .map_err(|e| format!("SubjectAccessReview: {e}"))?;
        let status = out.status.unwrap_or_default();
        Ok(AccessDecision {
            allowed: status.allowed && status.denied != Some(true),
            reason: status.reason.unwrap_or_default(),
        })
    }
}
