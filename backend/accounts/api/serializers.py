from __future__ import annotations

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from backend.accounts.models import AllowedIp, AllowedIpEvent, ApiToken, SshKey, UnixAccount
from backend.accounts.unix import account_errors
from backend.accounts.validators import parse_allowed_network
from backend.vcs.models import Role


class ApiTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at"]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at"]

    def validate_name(self, name: str) -> str:
        user = self.context["request"].user
        if ApiToken.objects.filter(user=user, name=name).exists():
            raise serializers.ValidationError(f"You already have a token named {name!r}.")
        return name


class NewApiTokenSerializer(ApiTokenSerializer):
    """A token just created: the only time its secret is shown."""

    token = serializers.CharField(read_only=True)

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class SshKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = SshKey
        fields = ["id", "name", "public_key", "key_type", "bits", "fingerprint", "created_at"]
        read_only_fields = ["id", "key_type", "bits", "fingerprint", "created_at"]
        extra_kwargs = {"name": {"required": False}}


class AllowedIpSerializer(serializers.ModelSerializer):
    address = serializers.CharField(write_only=True, max_length=60)
    expires_at = serializers.DateTimeField(required=False)
    expired = serializers.BooleanField(read_only=True)

    class Meta:
        model = AllowedIp
        fields = ["id", "address", "network", "description", "created_at", "expires_at", "expired"]
        read_only_fields = ["id", "network", "created_at", "expired"]

    def validate_address(self, address: str) -> str:
        try:
            return parse_allowed_network(address)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from error


class AllowedIpEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AllowedIpEvent
        fields = ["id", "network", "kind", "at", "expires_at"]


class UnixAccountSerializer(serializers.ModelSerializer):
    """The Unix account a user's jobs run as (set by a cluster admin, or provisioned)."""

    class Meta:
        model = UnixAccount
        fields = ["unix_name", "uid", "gid", "provisioned", "created_at"]
        read_only_fields = ["provisioned", "created_at"]

    def validate(self, attrs: dict) -> dict:
        errors = account_errors(attrs.get("uid"), attrs.get("gid"), attrs.get("unix_name", ""))
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class UserSerializer(serializers.ModelSerializer):
    password = serializers.CharField(write_only=True, required=False, min_length=8)
    unix_account = UnixAccountSerializer(read_only=True, allow_null=True)

    class Meta:
        model = User
        fields = [
            "username", "email", "password", "is_active", "is_staff", "date_joined",
            "unix_account",
        ]  # fmt: skip
        read_only_fields = ["is_active", "date_joined"]
        extra_kwargs = {"email": {"required": False}, "is_staff": {"required": False}}

    def validate_password(self, password: str) -> str:
        validate_password(password)
        return password


class LoginSerializer(serializers.Serializer):
    """A username and password, as the dashboard's sign-in form sends them."""

    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class MyMembershipSerializer(serializers.Serializer):
    """A VC one belongs to, and one's role in it."""

    name = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.EmailField()
    is_cluster_admin = serializers.BooleanField(source="is_staff")
    vcs = serializers.SerializerMethodField()
    unix_account = serializers.SerializerMethodField()

    @extend_schema_field(UnixAccountSerializer(allow_null=True))
    def get_unix_account(self, user: User) -> dict | None:
        account = UnixAccount.objects.filter(user=user).first()
        return UnixAccountSerializer(account).data if account else None

    @extend_schema_field(MyMembershipSerializer(many=True))
    def get_vcs(self, user: User) -> list[dict[str, str]]:
        return [
            {"name": name, "role": role}
            for name, role in user.memberships.order_by("vc__name").values_list("vc__name", "role")
        ]


class TenancySerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=["multi-tenant", "single-user"])
    message = serializers.CharField()


class SessionSerializer(serializers.Serializer):
    me = MeSerializer(allow_null=True)
    tenancy = TenancySerializer(required=False)
